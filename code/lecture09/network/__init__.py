"""The slow network made real: a link emulator and what runs on it (lecture 9, §5.12;
code 05's --demo emulator, --demo executed, --demo time; code 06's --relay-*; code 01's --links).

Read in this order: emulator (directed links with a latency and a bandwidth, FIFO per
link, a shared-uplink switch, bytes metered from what is sent, a time scale), accuracy
(the emulator measured against its own model), executed (demo 1's layouts run as real
messages on 32 emulated devices) and executed_report (its table and observations),
http_relay (a loopback HTTP relay with a delay queue and a token bucket, for code 6),
gloo_links (the same links between real gloo ranks), collectives_links (code 01's demo 7:
ranks/' collectives on those links, measured beside the α–β model).
Nothing here imports torch.
"""
