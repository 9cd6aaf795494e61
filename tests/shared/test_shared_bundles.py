"""The bundle checker and packer (docs/protocols.md §4.7): hostile archives are refused with a
stable reason, whatever the Python patch level's tarfile filters would do; packing is
deterministic and always passes the checker."""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qinglong.shared.bundles import (
    DEFAULT_LIMITS,
    BundleError,
    BundleLimits,
    BundleTooLargeError,
    PackError,
    normalize_entry_point,
    pack,
    scan,
)

# --- hostile archives, written with tarfile itself (it writes what we ask) ---------------


def entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x", **attrs: object
          ) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, (data if info.size else None)


def archive(*entries: tuple[tarfile.TarInfo, bytes | None],
            fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=fmt) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def reason_of(data: bytes, limits: BundleLimits = DEFAULT_LIMITS) -> str:
    with pytest.raises(BundleError) as caught:
        scan(io.BytesIO(data), limits)
    return caught.value.reason


OK = entry("ok.sh")


@pytest.mark.parametrize(("hostile", "reason"), [
    (entry("../x"), "parent_reference"),
    (entry("a/../../x"), "parent_reference"),
    (entry("./../x"), "parent_reference"),
    (entry("/etc/x"), "absolute_path"),
    (entry(".//etc/x"), "absolute_path"),
    (entry("l", tarfile.SYMTYPE, linkname="/etc/passwd"), "link"),
    (entry("h", tarfile.LNKTYPE, linkname="ok.sh"), "link"),
    (entry("dev", tarfile.CHRTYPE, devmajor=1, devminor=3), "special_file"),
    (entry("blk", tarfile.BLKTYPE, devmajor=8, devminor=0), "special_file"),
    (entry("fifo", tarfile.FIFOTYPE), "special_file"),
    (entry("c", tarfile.CONTTYPE), "special_file"),
    (entry("ok.sh"), "duplicate"),
    (entry("./ok.sh"), "duplicate"),
    (entry("ok.sh/inner"), "path_conflict"),
    (entry("ok.sh", tarfile.DIRTYPE), "duplicate"),
    (entry("a//b"), "bad_name"),
    (entry("a/./b"), "bad_name"),
    (entry("bell\x07"), "bad_name"),
    (entry("x" * 256), "bad_name"),
])
def test_a_hostile_member_refuses_the_whole_bundle(
        hostile: tuple[tarfile.TarInfo, bytes | None], reason: str) -> None:
    assert reason_of(archive(OK, hostile)) == reason


def test_a_file_where_a_directory_was_implied_is_a_conflict() -> None:
    assert reason_of(archive(entry("d/inner"), entry("d"))) == "path_conflict"


def test_dot_slash_prefixes_and_the_root_entry_are_accepted() -> None:
    manifest = scan(io.BytesIO(archive(entry("./", tarfile.DIRTYPE), entry("./run.sh"),
                                       entry("./lib", tarfile.DIRTYPE),
                                       entry("./lib/util.sh"))))
    assert [m.path for m in manifest.members] == ["run.sh", "lib", "lib/util.sh"]


def test_setuid_sticky_and_world_write_bits_never_survive() -> None:
    manifest = scan(io.BytesIO(archive(
        entry("suid", mode=0o4777), entry("plain", mode=0o666),
        entry("d", tarfile.DIRTYPE, mode=0o1777))))
    assert {m.path: m.mode for m in manifest.members} == {"suid": 0o755, "plain": 0o644,
                                                          "d": 0o755}


def test_not_gzip_corrupt_and_empty_archives_are_refused() -> None:
    assert reason_of(b"PK\x03\x04 not a tarball") == "not_gzip"
    assert reason_of(gzip.compress(b"this is not a tar header" * 40)) == "corrupt"
    assert reason_of(archive(OK)[:-30]) == "corrupt"
    assert reason_of(archive(entry("d", tarfile.DIRTYPE))) == "empty"


def test_a_huge_member_count_is_too_large() -> None:
    many = archive(*(entry(f"f{i}") for i in range(30)))
    with pytest.raises(BundleTooLargeError) as caught:
        scan(io.BytesIO(many), BundleLimits(members=20))
    assert caught.value.reason == "too_many_members"


def test_files_beyond_the_unpacked_bound_are_too_large() -> None:
    with pytest.raises(BundleTooLargeError) as caught:
        scan(io.BytesIO(archive(entry("a", data=b"a" * 600), entry("b", data=b"b" * 600))),
             BundleLimits(unpacked_bytes=1000))
    assert caught.value.reason == "too_large_unpacked"


def test_a_huge_declared_size_is_refused_before_its_data_is_read() -> None:
    info, _ = entry("big")
    info.size = 10**12  # a header claiming a terabyte, followed by nothing
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as gz:
        gz.write(info.tobuf(tarfile.PAX_FORMAT))
    with pytest.raises(BundleTooLargeError) as caught:
        scan(io.BytesIO(buffer.getvalue()))
    assert caught.value.reason == "too_large_unpacked"


def test_a_decompression_bomb_in_a_pax_header_is_refused_at_its_header() -> None:
    bomb = archive(entry("ok.sh", pax_headers={"comment": "z" * 3_000_000}))
    assert len(bomb) < 20_000  # small compressed, megabytes unpacked
    with pytest.raises(BundleTooLargeError) as caught:
        scan(io.BytesIO(bomb))
    assert caught.value.reason == "header_too_large"


def test_more_compressed_bytes_than_the_bound_are_refused() -> None:
    data = archive(entry("noise", data=os.urandom(50_000)))
    with pytest.raises(BundleTooLargeError) as caught:
        scan(io.BytesIO(data), BundleLimits(compressed_bytes=10_000))
    assert caught.value.reason == "too_large_compressed"


def test_messages_never_carry_a_member_name() -> None:
    secret = "SECRET-NAME"
    with pytest.raises(BundleError) as caught:
        scan(io.BytesIO(archive(OK, entry(f"../{secret}"))))
    assert secret not in str(caught.value)
    assert "member 2" in str(caught.value)


@pytest.mark.parametrize(("text", "stored"), [("run.sh", "run.sh"), ("./bin/run", "bin/run"),
                                              ("lib/", "lib")])
def test_entry_points_are_normalized_like_members(text: str, stored: str) -> None:
    assert normalize_entry_point(text) == stored


@pytest.mark.parametrize("text", ["", ".", "/etc/passwd", "../x", "a/../b", "a//b"])
def test_entry_points_outside_the_bundle_are_refused(text: str) -> None:
    with pytest.raises(BundleError):
        normalize_entry_point(text)


@pytest.mark.parametrize("first", [("/", tarfile.AREGTYPE), ("lib/", tarfile.AREGTYPE)],
                         ids=["slash-name", "old-style-file-named-as-a-dir"])
def test_a_directory_header_with_data_is_refused_not_read_past(
        first: tuple[str, bytes]) -> None:
    """An old-style (AREGTYPE) file whose name ends in "/" is read back by tarfile as a
    directory, whose data it does not skip: the member after it (here a symlink to '..')
    was then never seen, the archive silently accepted (found by the property below)."""
    name, kind = first
    data = archive(entry("a"), entry(name, kind), entry("..", tarfile.SYMTYPE, linkname="x"))
    assert reason_of(data) == "corrupt"


def raw_tar(*blocks: bytes, tail: bytes = b"\0" * 1024) -> bytes:
    """A gzip tar of the given raw 512-byte-aligned pieces and ``tail``."""
    return gzip.compress(b"".join(blocks) + tail)


def header(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0,
           fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(fmt)


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


SCRIPT = header("run.sh", size=5) + padded(b"true\n")


@pytest.mark.parametrize("kind", [tarfile.REGTYPE, tarfile.CONTTYPE])
def test_a_file_whose_name_ends_in_a_slash_is_refused_as_corrupt(kind: bytes) -> None:
    """GNU tar lists a type-0 member named "x/" as an empty directory: its code would be
    hidden from a reviewer, yet tarfile reads it as a file "x" that a task can run."""
    hidden = header("x/", kind, size=18) + padded(b"#!/bin/sh\necho hi\n")
    assert reason_of(raw_tar(SCRIPT, hidden)) == "corrupt"
    assert reason_of(archive(OK, entry("y", pax_headers={"path": "x/"}))) == "corrupt"
    assert reason_of(archive(OK, entry("d" * 120 + "/"), fmt=tarfile.GNU_FORMAT)) == "corrupt"


def test_an_empty_directory_whose_name_ends_in_a_slash_is_accepted() -> None:
    manifest = scan(io.BytesIO(raw_tar(SCRIPT, header("lib/", tarfile.DIRTYPE),
                                       header("old/", tarfile.AREGTYPE))))
    assert [(m.path, m.kind) for m in manifest.members] == [
        ("run.sh", "file"), ("lib", "dir"), ("old", "dir")]


def test_a_garbage_header_does_not_silently_end_the_archive() -> None:
    garbage = b"not a header, yet tarfile stops here quietly".ljust(512, b"!")
    assert reason_of(raw_tar(SCRIPT, garbage, SCRIPT)) == "corrupt"
    assert reason_of(raw_tar(SCRIPT, garbage)) == "corrupt"


def test_the_archive_must_end_with_its_two_end_blocks_and_only_zeros_after() -> None:
    assert scan(io.BytesIO(raw_tar(SCRIPT))).member_count == 1
    assert scan(io.BytesIO(raw_tar(SCRIPT, tail=b"\0" * 10240))).member_count == 1
    assert reason_of(raw_tar(SCRIPT, tail=b"")) == "corrupt"  # truncated after a member
    assert reason_of(raw_tar(SCRIPT, tail=b"\0" * 512)) == "corrupt"  # one end block
    hidden = header("hidden.sh", size=5) + padded(b"evil\n")
    assert reason_of(raw_tar(SCRIPT, b"\0" * 512, hidden)) == "corrupt"
    assert reason_of(raw_tar(SCRIPT, tail=b"\0" * 1024 + hidden)) == "corrupt"


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME,
                                  tarfile.GNUTYPE_LONGLINK])
def test_an_extended_header_over_64_kib_is_refused_before_it_is_read(kind: bytes) -> None:
    """The header alone is refused: what follows it is never decompressed (here it is
    missing altogether, so reading it would fail differently)."""
    claimed = header("././@LongLink", kind, size=512 * 1024 * 1024)
    with pytest.raises(BundleTooLargeError) as caught:
        scan(io.BytesIO(raw_tar(claimed, tail=b"")))
    assert caught.value.reason == "header_too_large"
    just_under = header("././@PaxHeader", kind, size=64 * 1024)
    assert reason_of(raw_tar(just_under, tail=b"\0" * 64 * 1024)) != "header_too_large"


def test_a_base256_size_field_is_read() -> None:
    field = b"\x80" + (512 * 1024 * 1024).to_bytes(11, "big")
    block = bytearray(header("././@PaxHeader", tarfile.XHDTYPE))
    block[124:136] = field
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    with pytest.raises(BundleTooLargeError) as caught:
        scan(io.BytesIO(raw_tar(bytes(block), tail=b"")))
    assert caught.value.reason == "header_too_large"


def test_a_pax_record_that_moves_the_data_is_refused() -> None:
    size = b"11 size=12\n"
    global_size = header("././@PaxHeader", tarfile.XGLTYPE, size=11) + padded(size)
    assert reason_of(raw_tar(global_size, SCRIPT)) == "corrupt"
    local_size = header("././@PaxHeader", tarfile.XHDTYPE, size=11) + padded(size)
    moved = local_size + header("a", size=0) + padded(b"twelve bytes")
    assert scan(io.BytesIO(raw_tar(moved))).unpacked_bytes == 12
    assert reason_of(archive(entry("a", pax_headers={"GNU.sparse.size": "1"}))) == "corrupt"
    broken = header("././@PaxHeader", tarfile.XHDTYPE, size=12) + padded(b"99 path=abc\n")
    assert reason_of(raw_tar(broken, SCRIPT)) == "corrupt"


def test_a_long_chain_of_extended_headers_is_refused() -> None:
    record = b"20 comment=01234567\n"
    one = header("././@PaxHeader", tarfile.XHDTYPE, size=len(record)) + padded(record)
    assert scan(io.BytesIO(raw_tar(one, SCRIPT))).member_count == 1
    assert reason_of(raw_tar(*[one] * 2000, SCRIPT)) == "corrupt"


# --- properties ---------------------------------------------------------------------------

SEGMENT = st.sampled_from(["..", ".", "", "a", "b", "c.sh", " ", "\x01", "é", "/", "./"])
NAMES = st.lists(SEGMENT, min_size=1, max_size=5).map("/".join)
KINDS = st.sampled_from([tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE,
                         tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE,
                         tarfile.BLKTYPE, tarfile.FIFOTYPE])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(NAMES, KINDS, st.integers(0, 0o7777)), min_size=1, max_size=8))
def test_whatever_the_archive_every_accepted_member_is_a_safe_relative_path(
        entries: list[tuple[str, bytes, int]]) -> None:
    data = archive(*(entry(name, kind, mode=mode, linkname="x") for name, kind, mode in entries))
    try:
        manifest = scan(io.BytesIO(data))
    except BundleError as exc:
        refused = exc.reason
    else:
        refused = None
    if refused is not None:
        assert refused in {"parent_reference", "absolute_path", "link", "special_file",
                           "duplicate", "path_conflict", "bad_name", "empty", "corrupt"}
        return
    paths = [m.path for m in manifest.members]
    assert len(paths) == len(set(paths))
    for member in manifest.members:
        parts = member.path.split("/")
        assert not member.path.startswith("/")
        assert ".." not in parts and "" not in parts and "." not in parts
        assert member.kind in ("file", "dir")
        assert member.mode in (0o644, 0o755)
    assert not any(k in (tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE,
                         tarfile.FIFOTYPE) for _, k, _ in entries)


TREE = st.dictionaries(
    st.lists(st.sampled_from(["a", "b", "lib", "run.sh", "é"]), min_size=1, max_size=3)
    .map("/".join), st.binary(max_size=64), min_size=1, max_size=6)


def _write_tree(root: Path, files: dict[str, bytes]) -> bool:
    for name, data in files.items():
        path = root / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            return False
    return True


@settings(max_examples=50, deadline=None)
@given(TREE)
def test_packing_is_deterministic_and_always_passes_the_checker(
        tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes]) -> None:
    first, second = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    if not (_write_tree(first, files) and _write_tree(second, dict(reversed(files.items())))):
        return
    os.utime(first, (1, 1))  # times and creation order do not matter
    data = pack(first)
    assert data == pack(second)
    manifest = scan(io.BytesIO(data))
    on_disk = {p.relative_to(first).as_posix() for p in first.rglob("*")}
    assert {m.path for m in manifest.members} == on_disk
    assert [m.path for m in manifest.members] == sorted(m.path for m in manifest.members)


def test_a_single_file_packs_as_one_member_named_by_its_base_name(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o750)
    manifest = scan(io.BytesIO(pack(script)))
    assert [(m.path, m.mode) for m in manifest.members] == [("job.sh", 0o755)]


def test_packing_refuses_symlinks_and_fifos_naming_them(tmp_path: Path) -> None:
    (tmp_path / "ok.sh").write_text("true\n")
    (tmp_path / "link").symlink_to("/etc/passwd")
    with pytest.raises(PackError) as caught:
        pack(tmp_path)
    assert caught.value.path == "link"
    (tmp_path / "link").unlink()
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(PackError) as caught:
        pack(tmp_path)
    assert caught.value.path == "pipe"
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)


def test_packing_an_empty_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "only-a-dir").mkdir()
    with pytest.raises(PackError):
        pack(tmp_path)
