"""What a finished test lets go (gpuaccept.plugin.release): the plan of which test is each host's last use."""
from types import SimpleNamespace

from gpuaccept.judging.recorder import limit_record
from gpuaccept.config.thresholds import Limit
from gpuaccept.plugin import release


class Item:
    """A pytest item as the plan reads it: hashed like pytest's (by nodeid), equal only to itself."""

    def __init__(self, nodeid: str, host: str | None):
        self.nodeid = nodeid
        if host is not None:
            self.callspec = SimpleNamespace(params={"node": host})

    def __hash__(self) -> int:
        return hash(self.nodeid)


def item(nodeid: str, host: str | None = None) -> Item:
    return Item(nodeid, host)


def test_a_hosts_last_use_is_its_last_test_or_a_later_fleet_test():
    seq = [item("t[h1]", "h1"), item("t[h2]", "h2"), item("fleet"), item("u[h1]", "h1")]
    plan = release.last_uses(seq, ["h1", "h2", "h3"])
    assert {it.nodeid: hosts for it, hosts in plan.items()} == {"fleet": ["h2", "h3"], "u[h1]": ["h1"]}


def test_without_fleet_tests_a_host_without_tests_is_never_planned():
    seq = [item("t[h1]", "h1"), item("t[h2]", "h2"), item("u[h1]", "h1")]
    plan = release.last_uses(seq, ["h1", "h2", "h3"])
    assert {it.nodeid: hosts for it, hosts in plan.items()} == {"t[h2]": ["h2"], "u[h1]": ["h1"]}


def test_the_same_nodeid_twice_is_planned_by_item_not_by_id():
    first, second = item("t[h1]", "h1"), item("t[h1]", "h1")
    assert release.last_uses([first, second]) == {second: ["h1"]}


def test_equal_limits_share_one_record_and_distinct_bounds_do_not():
    a = Limit("h200", "c", "min", 1.0, "GB/s", "file")
    b = Limit("h200", "c", "min", 1, "GB/s", "file")
    assert limit_record(a) is limit_record(Limit("other", "d", "min", 1.0, "GB/s", "file"))
    assert limit_record(a) == {"min": 1.0, "source": "file"} and repr(limit_record(b)["min"]) == "1"
    assert limit_record(Limit("h200", "c", "max", 2.0, "W", "file", site="site.yaml:3")) == {
        "max": 2.0, "source": "file", "site": "site.yaml:3"}


def test_the_hosts_in_the_run_are_those_with_a_test_of_their_own():
    """-k/-m left h2's tests out: h2 is not in the run (no verdict, no fleet test reads it); with only fleet-wide
    tests selected every selected host is, in the selection's order."""
    assert release.hosts_in_run(["h3", None, "h1", "h3"], ["h1", "h2", "h3"]) == ["h1", "h3"]
    assert release.hosts_in_run([None, None], ["h1", "h2"]) == ["h1", "h2"]
    assert release.hosts_in_run([], ["h1"]) == ["h1"]
