"""gpuaccept/judging/fleet.py: cross-host comparisons read only the hosts whose reading was read."""


def test_an_unread_driver_never_votes():
    """A driver version not read ("None", as str(None) makes it, or "") is left out: the one host read is not blamed
    against a majority of unread hosts."""
    from gpuaccept.judging import fleet
    assert fleet.driver_split({"580.159.04": ["a"], "None": ["b", "c"], "": ["d"]}) == []
    assert fleet.driver_split({"580.159.04": ["a", "b"], "570.195.03": ["c"], "None": ["d", "e", "f"]}) == [
        ("c", "driver 570.195.03, while 2 of 3 hosts run 580.159.04")]
