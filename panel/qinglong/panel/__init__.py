"""The Qinglong 3 web panel (docs/panel.md; DESIGN §4.6): server-rendered pages over a
:class:`~qinglong.panel.backend.PanelBackend`, one for each profile."""
