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
"""

import sys
from dataclasses import replace

from lecture01.console import print_table, print_wrapped


RELAY_BUDGET_S = 300.0   # real seconds the relayed runs may take (priced by table (1b)'s model)


def relay_budget_s(direct, link, round_trips):
    """Seconds the relayed runs would spend on the link: every mode's modelled communication
    per worker step x its steps (the workers wait in parallel)."""
    return sum(modelled_comm_s(r, link, round_trips) * r.steps for r in direct)


def relay_demo(run_swarm, round_trips, args, server_config, worker_config, val_tokens, direct, link):
    """Code 6's --relay: every mode of args.modes trained again in a fresh pool, each worker
    behind its own relay on `link` (table (1b)'s); then table (1c) beside `direct`.
    run_swarm and round_trips (ROUND_TRIPS_PER_REQUEST) come from swarm_report, which calls
    this (passed in: no import cycle)."""
    from lecture01.tiny_gpt import load_world_tokens
    from lecture09.swarm.swarm_pool import start_worker_pool, stop_worker_pool, wait_until_ready
    planned_s = relay_budget_s(direct, link, round_trips)
    if planned_s > RELAY_BUDGET_S:
        print(f"\n(1c) 不跑：这条链路上要约 {planned_s:.3g} 秒 > {RELAY_BUDGET_S:.0f} 秒 (too slow to run)")
        return []
    pool, finished, relayed = start_worker_pool(args.workers, train_tokens=load_world_tokens()[0]), False, []
    try:
        wait_until_ready(pool)
        for mode in args.modes:
            relayed.append(run_swarm(pool, replace(server_config, compression=mode),
                                     replace(worker_config, compression=mode), val_tokens, args.attack,
                                     relay_link=link))
            print(f"  {mode} (relay): {relayed[-1].wall_s:.1f} s", file=sys.stderr, flush=True)
        finished = True
    finally:
        stop_worker_pool(pool, at_once=not finished)
    print_relay(direct, relayed, link, round_trips)
    return relayed


def print_relay(direct, relayed, link, round_trips):
    print("\n(1c) 经过模拟链路的中继 through a relay on the link of (1b): measured beside modelled")
    print_wrapped(relay_observation(print_relay_table(direct, relayed, link, round_trips)))


def modelled_comm_s(r, link, round_trips):
    """Table (1b)'s communication per worker step, with `round_trips` per request."""
    latency = r.requests_per_upload * round_trips * link.rtt_ms / 1e3
    return latency + link.upload_s(r.up_bytes_per_upload) + link.download_s(r.down_bytes_per_upload)


def relay_rows(direct, relayed, link, round_trips):
    """[(mode, direct s, relayed s, network s measured, modelled comm, with 1 RTT)] per step."""
    return [(d.compression, d.round_s, r.round_s, r.round_s - d.round_s, modelled_comm_s(r, link, round_trips),
             modelled_comm_s(r, link, 1)) for d, r in zip(direct, relayed)]


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
