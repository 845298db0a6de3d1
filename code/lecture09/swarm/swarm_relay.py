"""Code 6's --relay: the swarm trained again with every worker behind a loopback relay
(network/http_relay.py) that delays each request and answer by the link of table (1b);
the measured seconds per step beside the modelled step, and the control that explains
the difference (lecture 9, §5.12 and §6).

The measured network seconds per step = the relayed run's seconds per step minus the same
run's direct (loopback) seconds per step: everything else (compute on this machine's 2
cores, the server's work) is in both. Beside it, table (1b)'s modelled communication
(requests x swarm_report.ROUND_TRIPS_PER_REQUEST RTTs + bytes at both rates) and its control, the same
with one round trip per request: the relay delays only the HTTP messages (RTT / 2 each way),
the TCP handshake to it is on loopback.

--relay-links gives each worker its own link (swarm_flags.relay_links). A synchronous round
waits for every worker's upload, so the model of a round is the slowest worker's link:
max over workers of the modelled communication (round_model_s); the mean over workers is
printed beside it as the control (what a round would cost if it did not wait for the slowest).
"""

import statistics
import sys
from dataclasses import replace

from lecture01.console import print_table, print_wrapped


RELAY_BUDGET_S = 300.0   # real seconds the relayed runs may take (priced by table (1b)'s model)


def per_worker_links(args, link):
    """The Link of each worker: --relay-links (rtt, up, down) if given, else `link` for all."""
    given = getattr(args, "relay_links", None)
    if not given:
        return [link] * getattr(args, "workers", 1)
    return [type(link)(up, down, rtt) for rtt, up, down in given]


def round_model_s(r, links, round_trips, combine=max):
    """A synchronous round's modelled communication: it waits for the slowest worker's link
    (combine=max); combine=statistics.mean is the control that does not wait."""
    links = links if isinstance(links, (list, tuple)) else [links]
    return combine([modelled_comm_s(r, link, round_trips) for link in links])


def relay_budget_s(direct, link, round_trips):
    """Seconds the relayed runs would spend on the link(s): every mode's modelled round x its
    steps (the workers wait in parallel, the round for the slowest)."""
    return sum(round_model_s(r, link, round_trips) * r.steps for r in direct)


def relay_demo(run_swarm, round_trips, args, server_config, worker_config, val_tokens, direct, link):
    """Code 6's --relay: every mode of args.modes trained again in a fresh pool, each worker
    behind its own relay on `link` (table (1b)'s); then table (1c) beside `direct`.
    run_swarm and round_trips (ROUND_TRIPS_PER_REQUEST) come from swarm_report, which calls
    this (passed in: no import cycle)."""
    from lecture01.tiny_gpt import load_world_tokens
    from lecture09.swarm.swarm_pool import start_worker_pool, stop_worker_pool, wait_until_ready
    links = per_worker_links(args, link)
    planned_s = relay_budget_s(direct, links, round_trips)
    if planned_s > RELAY_BUDGET_S:
        print(f"\n(1c) 不跑：这条链路上要约 {planned_s:.3g} 秒 > {RELAY_BUDGET_S:.0f} 秒 (too slow to run)")
        return []
    pool, finished, relayed = start_worker_pool(args.workers, train_tokens=load_world_tokens()[0]), False, []
    try:
        wait_until_ready(pool)
        for mode in args.modes:
            relayed.append(run_swarm(pool, replace(server_config, compression=mode),
                                     replace(worker_config, compression=mode), val_tokens, args.attack,
                                     relay_link=links))
            print(f"  {mode} (relay): {relayed[-1].wall_s:.1f} s", file=sys.stderr, flush=True)
        finished = True
    finally:
        stop_worker_pool(pool, at_once=not finished)
    print_relay(direct, relayed, links, round_trips)
    return relayed


def print_relay(direct, relayed, links, round_trips):
    if len(set(links)) == 1:
        print("\n(1c) 经过模拟链路的中继 through a relay on the link of (1b): measured beside modelled")
        print_wrapped(relay_observation(print_relay_table(direct, relayed, links[0], round_trips)))
        return
    print("\n(1c) 每个工作者一条自己的链路 per-worker links (--relay-links): measured beside modelled")
    print_wrapped("链路 links：" + "；".join(f"w{i} RTT {k.rtt_ms:g} ms、上行 {k.uplink_mbyte_per_s:g} MB/s、下行 "
                                          f"{k.downlink_mbyte_per_s:g} MB/s" for i, k in enumerate(links)) + "。")
    rows = relay_rows(direct, relayed, links, round_trips)
    means = [round_model_s(r, links, 1, statistics.mean) for r in relayed]
    print_table(["压缩", "直连 秒/步", "经中继 秒/步", "差 = 网络", "模型：最慢", "最慢 1 次往返", "平均 1 次往返",
                 "网络/最慢1"],
                [[m, f"{a:.3f}", f"{b:.3f}", f"{n:.3f}", f"{mod:.3f}", f"{one:.3f}", f"{mean:.3f}", f"{n / one:.2f}"]
                 for (m, a, b, n, mod, one), mean in zip(rows, means)])
    print_wrapped("同步的一轮要等每个工作者的上传，所以模型 = 最慢那个工作者的链路上的通信（表 (1b) 的算法，每个请求 "
                  f"{round_trips} 次往返，取各工作者的最大值）。中继只延迟 HTTP 消息、不延迟握手，所以比较用每个请求 1 次"
                  "往返：最慢 1 次往返 vs 对照 平均 1 次往返（一轮若不等最慢的那个），两列只差\"取最大还是取平均\"。"
                  "差 = 经中继 − 直连（实测，随负载变）。")
    print_wrapped(slowest_observation(rows, means))


def slowest_observation(rows, means):
    """Whether the measured network seconds per round are nearer the slowest link's model or
    the mean link's (the control), both with one round trip per request (rows' `one`, means),
    read off table (1c)."""
    nearer = [m for (m, _, _, n, _, one), mean in zip(rows, means) if abs(n - one) < abs(n - mean)]
    parts = "；".join(f"{m} 实测 {n:.3f}、最慢链路 {one:.3f}、平均 {mean:.3f}"
                     for (m, _, _, n, _, one), mean in zip(rows, means))
    if any(n <= 0 for _, _, _, n, _, _ in rows):
        verdict = "有一种直连反而比经中继慢：这台机器的负载差别比网络还大，这次读不出结论"
    elif len(nearer) == len(rows):
        verdict = "每一种都离最慢链路的模型更近：同步的一轮由最慢的工作者决定，快的工作者在等它"
    elif not nearer:
        verdict = "每一种都离平均链路更近：这一轮并没有等最慢的工作者（截止时间或负载），看服务器的轮次"
    else:
        verdict = f"{'、'.join(nearer)} 离最慢链路更近，其余离平均更近：差别在噪声之内，多跑几次再下结论"
    return f"每步的网络秒数（{parts}）：{verdict}。"


def modelled_comm_s(r, link, round_trips):
    """Table (1b)'s communication per worker step, with `round_trips` per request."""
    latency = r.requests_per_upload * round_trips * link.rtt_ms / 1e3
    return latency + link.upload_s(r.up_bytes_per_upload) + link.download_s(r.down_bytes_per_upload)


def relay_rows(direct, relayed, link, round_trips):
    """[(mode, direct s, relayed s, network s measured, modelled comm, with 1 RTT)] per step;
    link may be one per worker: then the slowest worker's (round_model_s)."""
    return [(d.compression, d.round_s, r.round_s, r.round_s - d.round_s, round_model_s(r, link, round_trips),
             round_model_s(r, link, 1)) for d, r in zip(direct, relayed)]


def print_relay_table(direct, relayed, link, round_trips):
    rows = relay_rows(direct, relayed, link, round_trips)
    print_table(["压缩", "直连 秒/步", "经中继 秒/步", "差 = 网络", "模型通信", "对照：1 次往返", "网络/模型"],
                [[m, f"{a:.3f}", f"{b:.3f}", f"{n:.3f}", f"{mod:.3f}", f"{one:.3f}", f"{n / mod:.2f}"]
                 for m, a, b, n, mod, one in rows])
    print_wrapped(f"经中继：每个工作者一个 127.0.0.1 上的中继，每个请求和回答各延迟 RTT/2 = {link.rtt_ms / 2:g} ms，"
                  f"再按上行 {link.uplink_mbyte_per_s:g} MB/s、下行 {link.downlink_mbyte_per_s:g} MB/s 排队（实测，随负载变）。"
                  f"差 = 经中继 − 直连（两次运行的计算和服务器一样）；模型通信 = 表 (1b)（每个请求 "
                  f"{round_trips} 次往返）；对照 = 只算 1 次往返（中继不延迟到它的 TCP 握手）。")
    return rows


def relay_observation(rows):
    """One sentence, read off the table: for how many modes the measured network seconds
    are nearer the one-round-trip control than the model."""
    nearer = [m for m, _, _, n, mod, one in rows if abs(n - one) < abs(n - mod)]
    parts = "；".join(f"{m} 实测 {n:.3f}、模型 {mod:.3f}、对照 {one:.3f}" for m, _, _, n, mod, one in rows)
    if any(n <= 0 for _, _, _, n, _, _ in rows):
        verdict = ("有一种直连反而比经中继慢：两次运行之间这台机器的负载差别比网络还大，这次读不出结论，"
                   "在空闲的机器上再跑")
    elif len(nearer) == len(rows):
        verdict = "每一种都离 1 次往返的对照更近：中继只延迟 HTTP 消息，模型多算的是握手那一次往返"
    elif not nearer:
        verdict = "每一种都离模型更近：多出来的是握手以外的等待（这台机器的负载也在里面）"
    else:
        verdict = f"{'、'.join(nearer)} 离 1 次往返的对照更近，其余离模型更近：差别在噪声之内，多跑几次再下结论"
    return f"每步的网络秒数（{parts}）：{verdict}。"
