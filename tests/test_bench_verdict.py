"""bench's verdicts for figures whose goal is stated at a fleet size: null below that size."""

from bench.__main__ import _holds
from bench.compare_scale import GOAL_HOSTS, verdict


def test_below_the_goal_size_is_null_with_the_size():
    for figure_holds in (True, False):
        row = verdict(figure_holds, 10)
        assert row["holds"] is None
        assert row["measured_at"] == {"hosts": 10, "goal_hosts": GOAL_HOSTS}


def test_at_the_goal_size_the_figure_decides():
    assert verdict(True, GOAL_HOSTS)["holds"] is True
    assert verdict(False, GOAL_HOSTS)["holds"] is False
    assert verdict(True, 2 * GOAL_HOSTS)["holds"] is True


def test_a_failed_run_is_a_miss_at_any_size():
    assert verdict(True, 10, failed=True)["holds"] is False
    assert verdict(True, GOAL_HOSTS, failed=True)["holds"] is False


def test_the_table_names_the_size_it_ran_at():
    assert _holds({"holds": None, **verdict(True, 10)}) == "n/a at 10 hosts (goal at 1,000)"
    assert _holds({"holds": None}) == "n/a"
    assert _holds({"holds": True}) == "yes" and _holds({"holds": False}) == "NO"
