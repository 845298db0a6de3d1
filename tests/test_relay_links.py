"""Code 6's --relay-links (swarm_flags.relay_links, swarm_relay's per-worker model, §6): the
flag's parser, the per-worker model by hand (a synchronous round waits for the slowest
worker's link), table (1c)'s observation on each branch, and one relayed run with 2 workers
and one slow link (sweep: it trains the swarm twice)."""

import argparse
from types import SimpleNamespace

import pytest

from lecture09.swarm.swarm_flags import relay_links
from lecture09.swarm import swarm_relay
from lecture09.swarm.swarm_report import Link
from conftest import LECTURE09, load_script


@pytest.mark.parametrize("text,want", [
    ("50:10", ((50.0, 10.0, 10.0),)),
    ("50:10,400:1:2", ((50.0, 10.0, 10.0), (400.0, 1.0, 2.0))),
    (" 0:0.5 , 60000:1e3 ", ((0.0, 0.5, 0.5), (60000.0, 1000.0, 1000.0))),
])
def test_relay_links_parses_one_link_per_worker(text, want):
    assert relay_links(text) == want


@pytest.mark.parametrize("text", ["50", "50:0", "-1:10", "60001:10", "50:10,abc", "50:10:", "50:nan", "50:10:1:1",
                                  ",", "x" * 200])
def test_relay_links_refuses_in_one_short_line(text):
    from lecture01.console import display_width
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        relay_links(text)
    message = str(caught.value)
    assert "\n" not in message and display_width(f"06_swarm_http.py: error: --relay-links: {message}（见 --help）") <= 100


def test_code6_relay_links_implies_relay_and_must_match_the_workers():
    code6 = load_script(LECTURE09 / "06_swarm_http.py")
    args = code6.parse_args(["--workers", "2", "--relay-links", "50:10,400:1:2"])
    assert args.relay and args.relay_links == ((50.0, 10.0, 10.0), (400.0, 1.0, 2.0))
    links = swarm_relay.per_worker_links(args, Link())
    assert links == [Link(10.0, 10.0, 50.0), Link(1.0, 2.0, 400.0)]
    assert swarm_relay.per_worker_links(code6.parse_args(["--workers", "3"]), Link()) == [Link()] * 3
    with pytest.raises(SystemExit) as caught:
        code6.parse_args(["--workers", "3", "--relay-links", "50:10,400:1"])
    assert caught.value.code == 2


def test_the_round_waits_for_the_slowest_link_by_hand():
    r = SimpleNamespace(requests_per_upload=2.0, up_bytes_per_upload=1e6, down_bytes_per_upload=2e6, steps=10)
    fast, slow = Link(10.0, 10.0, 50.0), Link(1.0, 1.0, 400.0)
    # 2 requests x 2 round trips x RTT + 1 MB up + 2 MB down
    assert swarm_relay.modelled_comm_s(r, fast, 2) == pytest.approx(0.2 + 0.1 + 0.2)
    assert swarm_relay.modelled_comm_s(r, slow, 2) == pytest.approx(1.6 + 1.0 + 2.0)
    assert swarm_relay.round_model_s(r, [fast, slow], 2) == pytest.approx(4.6)
    import statistics
    assert swarm_relay.round_model_s(r, [fast, slow], 2, statistics.mean) == pytest.approx((0.5 + 4.6) / 2)
    assert swarm_relay.round_model_s(r, [fast, slow], 1) == pytest.approx(0.8 + 3.0)    # the 1-RTT control
    assert swarm_relay.relay_budget_s([r], [fast, slow], 2) == pytest.approx(46.0)
    direct = [SimpleNamespace(compression="none", round_s=0.3)]
    relayed = [SimpleNamespace(compression="none", round_s=5.0, **vars(r))]
    (mode, a, b, net, model, one), = swarm_relay.relay_rows(direct, relayed, [fast, slow], 2)
    assert (mode, net, model, one) == ("none", pytest.approx(4.7), pytest.approx(4.6), pytest.approx(3.8))


def test_slowest_observation_reads_its_table_on_each_branch():
    # (mode, direct, relayed, network, slowest model with 2 round trips, slowest with 1); means: 1 round trip
    near_slowest = [("none", 0.3, 4.4, 4.1, 4.6, 3.8)]
    text = swarm_relay.slowest_observation(near_slowest, [2.15])
    assert "none 实测 4.100、最慢链路 3.800、平均 2.150" in text and "每一种都离最慢链路的模型更近" in text
    assert "每一种都离平均链路更近" in swarm_relay.slowest_observation([("none", 0.3, 2.3, 2.0, 4.6, 3.8)], [2.15])
    mixed = near_slowest + [("topk", 0.3, 2.3, 2.0, 4.6, 3.8)]
    assert "none 离最慢链路更近，其余离平均更近" in swarm_relay.slowest_observation(mixed, [2.15, 2.15])
    noisy = [("none", 0.3, 0.2, -0.1, 4.6, 3.8)]
    assert "读不出结论" in swarm_relay.slowest_observation(noisy, [2.15])


@pytest.mark.slow
@pytest.mark.sweep
def test_code6_relay_with_one_slow_worker_prints_both_models():
    from conftest import main_quietly
    from lecture01.console import display_width
    code6 = load_script(LECTURE09 / "06_swarm_http.py")
    _, out = main_quietly(code6.main, ["--quick", "--modes", "topk", "--relay-links", "0:1000,100:1"])
    assert "(1c) 每个工作者一条自己的链路" in out and "w1 RTT 100 ms、上行 1 MB/s、下行 1 MB/s" in out
    assert "最慢 1 次往返" in out and "每步的网络秒数（topk 实测" in out
    assert not [line for line in out.splitlines() if display_width(line) > 100]
