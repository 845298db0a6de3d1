"""The model every lecture-9 script trains or measures, in one place.

It is lecture 1's tiny GPT (tiny_gpt.BASE_CONFIG, 83,468 parameters), so lecture 9's
numbers can be compared with lecture 1's. To try lecture 9 with another size, change
MODEL_CONFIG here, e.g. `replace(BASE_CONFIG, n_embd=96)`: codes 02–06, their byte counts
and the swarm's body limit follow; the notes' figures are for the default.
"""

from dataclasses import replace  # noqa: F401  (for the edit suggested above)

from lecture01.tiny_gpt import BASE_CONFIG

MODEL_CONFIG = BASE_CONFIG
