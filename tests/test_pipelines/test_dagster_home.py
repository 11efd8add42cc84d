"""``duet ui``'s Dagster home (:mod:`pipelines.dagster.home`): a Dagster instance on it has
telemetry off and does not show the "Join the Dagster community" dialog (Dagster's own
``nux`` setting, which the webserver's ``shouldShowNux`` reads), and a ``dagster.yaml`` the
user edited is kept as it is (issue 44)."""

from __future__ import annotations

from pathlib import Path

from pipelines.dagster.home import DAGSTER_YAML, ensure_dagster_home


def _instance_settings(home: Path) -> tuple[bool, bool]:
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        return instance.telemetry_enabled, instance.nux_enabled


def test_a_new_home_has_no_telemetry_and_no_first_visit_dialog(tmp_path: Path) -> None:
    home = ensure_dagster_home(tmp_path / "dagster", set_env=False)
    assert (home / "dagster.yaml").read_text() == DAGSTER_YAML
    assert _instance_settings(home) == (False, False)


def test_a_home_of_an_earlier_duet_gets_the_setting_and_a_users_file_is_kept(tmp_path: Path) -> None:
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    ensure_dagster_home(earlier, set_env=False)
    assert _instance_settings(earlier) == (False, False)

    edited = tmp_path / "edited"
    edited.mkdir()
    (edited / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    ensure_dagster_home(edited, set_env=False)
    assert (edited / "dagster.yaml").read_text() == "telemetry:\n  enabled: true\n"
    assert _instance_settings(edited) == (True, True)  # Dagster's defaults, as the user left them
