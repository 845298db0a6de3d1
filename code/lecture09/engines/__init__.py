"""The field's engines beside our teaching versions: torchft and hivemind.

torchft_replica is one replica group in its own process; torchft_run holds the Lighthouse,
starts the replicas and kills and restarts one; torchft_report prints code 9's tables
(notes §9, 09_torchft.py; torchft's wheel exists for Linux only). hivemind_peer,
hivemind_run and hivemind_report do the same for code 10's DHT swarm (notes §10,
10_hivemind.py; no Windows wheel). reference.py holds our DiLoCo simulation, which both are
checked against. On a platform without the engine, its script says so and exits 2.
"""


def unavailable(module, platform_ok, why):
    """The one line a script prints before it exits 2 when the engine `module` cannot run
    here: `why` on a platform it has no wheel for, or how to install it; None if it can."""
    import importlib.util

    if not platform_ok:
        return why
    if importlib.util.find_spec(module) is None:       # installed? (without importing it)
        return f"没有装 {module}：先运行 pip install -r requirements.txt ({module} is not installed)"
    return None
