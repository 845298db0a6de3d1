"""Attacks: what f lying workers send instead of their gradients (lecture 9, notes §8;
code 08 in simulation, code 6's `--attack` on the wire).

The liars here are omniscient, as in the papers: each round they see the honest workers'
vectors (what the receiver decodes) and their own honest gradient. An attack is called as

    attack(own, honest) -> [f vectors]    own: the liars' honest vectors; honest: the others'

    sign-flip    each liar sends minus its own gradient
    alie         "a little is enough" (Baruch et al., NeurIPS 2019): the honest mean plus
                 z = 1.5 honest standard deviations per coordinate (ByzFL's default; the
                 paper's z_max formula gives z = 0 for n = 8, f = 1)
    ipm          inner-product manipulation (Xie, Koyejo & Gupta, UAI 2020): minus
                 eps = 0.1 times the honest mean, so the aggregate still points downhill
                 for mean-like rules but less so
    tiny-dense   +-1e-4 in every entry, a random sign each: 0.7% of the upload clip cap,
                 yet AdamW moves every entry whose running second moment is near zero by
                 about its learning rate (issue measured 4.35x an honest round)
    tiny-dense-fixed   the same, with the same signs every round (so the pushes add up)
    gaussian     N(0, 1) in every entry (the clip cap then scales it down)
    replay       last round's honest upload of worker 0, sent again (a stale but honest
                 vector; under another worker's identity the swarm must refuse it)
    none         the liars send their honest gradients (a control row)
"""

import torch

TINY = 1e-4
ALIE_Z = 1.5
IPM_EPS = 0.1
GAUSSIAN_SIGMA = 1.0


class AttackError(ValueError):
    """Attack settings that cannot work; the message says why."""


def _mean(honest):
    return torch.stack(honest).mean(dim=0)


class NoAttack:
    name = "none"

    def __call__(self, own, honest):
        return [v.clone() for v in own]


class SignFlip:
    name = "sign-flip"

    def __call__(self, own, honest):
        return [-v for v in own]


class ALIE:
    name = "alie"

    def __init__(self, z=ALIE_Z):
        self.z = z

    def __call__(self, own, honest):
        if len(honest) < 2:
            raise AttackError("alie needs at least 2 honest workers (a standard deviation)")
        x = torch.stack(honest)
        vector = x.mean(dim=0) + self.z * x.std(dim=0, correction=1)
        return [vector.clone() for _ in own]


class IPM:
    name = "ipm"

    def __init__(self, eps=IPM_EPS):
        self.eps = eps

    def __call__(self, own, honest):
        vector = -self.eps * _mean(honest)
        return [vector.clone() for _ in own]


class TinyDense:
    name = "tiny-dense"
    fixed = False          # True: the same signs every round

    def __init__(self, size=TINY, seed=0):
        self.size, self.seed = size, seed
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, own, honest):
        if self.fixed:
            self.generator.manual_seed(self.seed)
        out = []
        for v in own:
            signs = torch.randint(0, 2, v.shape, generator=self.generator).float() * 2 - 1
            out.append(signs * self.size)
        return out


class TinyDenseFixed(TinyDense):
    name = "tiny-dense-fixed"
    fixed = True


class Gaussian:
    name = "gaussian"

    def __init__(self, sigma=GAUSSIAN_SIGMA, seed=0):
        self.sigma = sigma
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, own, honest):
        return [torch.randn(v.shape, generator=self.generator) * self.sigma for v in own]


class Replay:
    """Stateful: remembers the honest vectors of the round before."""
    name = "replay"

    def __init__(self):
        self.last = None

    def __call__(self, own, honest):
        previous = self.last
        self.last = honest[0].clone()
        source = previous if previous is not None else own[0]   # round 1: nothing to replay yet
        return [source.clone() for _ in own]


ATTACKS = {cls.name: cls for cls in (NoAttack, SignFlip, ALIE, IPM, TinyDense, TinyDenseFixed, Gaussian, Replay)}


def make(name, seed=0):
    if name not in ATTACKS:
        raise AttackError(f"unknown attack {name!r}; expected one of {tuple(ATTACKS)}")
    cls = ATTACKS[name]
    return cls(seed=seed) if cls in (TinyDense, TinyDenseFixed, Gaussian) else cls()
