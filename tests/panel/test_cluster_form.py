"""The cluster's task form turned into the API's JSON and the API's refusals worded from
the catalogs (docs/panel.md "Cluster"): write-only secrets kept, replaced or removed, an
``argv`` kept while its command text is unchanged, backoffs in seconds, a schedule's field
and a zone's guess named in the user's language."""

from __future__ import annotations

from qinglong.panel import i18n
from qinglong.panel.cluster_form import ClusterTaskForm, body, worded, worded_problems

STORED = {"name": "京东签到", "argv": ["/bin/echo", "京东 签到"], "shell": None,
          "schedule": "0 8 * * *", "timezone": "Asia/Shanghai", "timeout_s": None,
          "max_attempts": 2, "retry_backoff_ms": 1500, "retry_backoff_cap_ms": 600_000,
          "concurrency_policy": "allow", "labels": {"platform": "jd"},
          "bundle_digest": None, "entry_point": None,
          "env": {"JD_NAME": {"value": "京东", "secret": False},
                  "JD_COOKIE": {"value": None, "secret": True},
                  "JD_PIN": {"value": None, "secret": True}}}


def test_a_stored_task_edits_back_to_a_patch_that_keeps_its_secrets_and_argv() -> None:
    form = ClusterTaskForm.from_task(STORED)
    assert form.secret_names == ["JD_COOKIE", "JD_PIN"] and form.env == "JD_NAME=京东"
    assert (form.backoff, form.labels, form.command) == (
        "1.5", "platform=jd", "/bin/echo '京东 签到'")
    form.secret_replace = {"JD_PIN": "新的"}
    form.secret_unset = []
    patch, errors = body(form, editing=True)
    assert errors == {}
    assert "argv" not in patch and "shell" not in patch and "version" not in patch
    assert patch["name"] == "京东签到"  # the name field renames (PATCH takes a name)
    assert patch["env"] == {"JD_NAME": {"value": "京东", "secret": False},
                            "JD_COOKIE": {"value": None, "secret": True},
                            "JD_PIN": {"value": "新的", "secret": True}}
    assert (patch["retry_backoff_ms"], patch["max_attempts"]) == (1500, 2)
    form.command = "echo 京东签到"
    form.secret_unset = ["JD_COOKIE"]
    patch, _ = body(form, editing=True)
    assert (patch["shell"], patch["argv"]) == ("echo 京东签到", None)
    assert "JD_COOKIE" not in patch["env"]
    # the version the form was opened at goes with the patch (a stale edit is refused)
    opened = ClusterTaskForm.from_task({**STORED, "version": 7})
    assert opened.version == "7" and body(opened, editing=True)[0]["version"] == 7
    assert opened.copied().version == "" and "version" not in body(opened.copied(),
                                                                   editing=False)[0]


def test_a_copy_has_no_name_and_no_secrets_and_creates_with_a_shell_line() -> None:
    copy = ClusterTaskForm.from_task(STORED).copied()
    assert copy.name == "" and copy.secret_names == [] and copy.argv is None
    copy.name = "京东签到-副本"
    spec, errors = body(copy, editing=False)
    assert errors == {}
    assert spec["name"] == "京东签到-副本" and spec["shell"] == "/bin/echo '京东 签到'"
    assert set(spec["env"]) == {"JD_NAME"}


def test_the_forms_own_shape_errors_name_their_fields() -> None:
    form = ClusterTaskForm(name="x", command="", timeout="1.5", attempts="two",
                           backoff="soon", env="NO_EQUALS", labels="platform")
    _, errors = body(form, editing=False)
    assert errors == {"command": "form.need_command", "timeout": "cform.whole_number",
                      "attempts": "cform.whole_number", "backoff": "form.bad_number",
                      "env": "cform.bad_pair", "labels": "cform.bad_pair"}
    entry = ClusterTaskForm(name="x", command="", entry="a" * 64 + "|签到.sh")
    spec, errors = body(entry, editing=False)
    assert errors == {} and spec["entry_point"] == "签到.sh" and spec["shell"] is None


def test_refusals_are_worded_in_the_users_language_beside_their_fields() -> None:
    zh, en = i18n.catalog("zh-CN"), i18n.catalog("en")
    part = {"field": "schedule", "code": "schedule", "params": {"part": "hour"}}
    assert worded(part, zh) == "“时”一段无效（5 段，或秒在最前的 6 段，或 @daily 这样的别名）。"
    assert worded(part, en).startswith("The hour field is invalid")
    guess = {"field": "timezone", "code": "timezone", "params": {"guess": "Asia/Shanghai"}}
    assert worded(guess, en).endswith("did you mean Asia/Shanghai?")
    backoff = {"field": "retry_backoff_ms", "code": "less_than_equal",
               "params": {"le": "2147483647"}}
    assert worded(backoff, en) == "Must be at most 2147483.647."
    assert worded({"field": "x", "code": "no_such_code"}, zh) == zh["cform.err.invalid"]
    form = ClusterTaskForm(secret_names=["JD_COOKIE"], secret_new="JD_PIN=1")
    fields, general = worded_problems([
        {"field": "env.JD_PIN.value", "code": "string_too_long",
         "params": {"max_length": "32768"}},
        {"field": "env.1BAD", "code": "env_name", "params": {}},
        {"field": "caller_timezone", "code": "invalid", "params": {}}], form, zh)
    assert fields == {"secrets": "太长（最多 32768 个字符）。", "env": zh["cform.err.env_name"]}
    assert general == zh["cform.err.invalid"]
