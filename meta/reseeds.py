"""Random ops during meta collection draw from a seeded state, so collection and tracing agree."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from meta.errors import UnsupportedOperatorError

__all__ = ["Reseeds"]


_RESEEDED = (
    "the function sets torch's global random state (torch.manual_seed, torch.set_rng_state, ...) other than by "
    "one seed before all its draws: eager's draws depend on where, which a compiled graph does not keep. Seed "
    "once before the draws, or outside the compiled function."
)


def _seeded_state(seed: int) -> torch.Tensor:
    return torch.Generator().manual_seed(seed).get_state()


class Reseeds(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """How the function sets torch's global random state: ``found`` is ``(seed, restores)`` where it seeds the
    generator once before all its draws (and puts the caller's state back after them, or not), for the runtime
    to do around each call as eager does at each; any other change is refused. Draws on fakes leave the real
    generator alone, so at each draw it holds what the function set; the caller's state is put back."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.state, self.seed = torch.random.get_rng_state(), torch.initial_seed()
        self.seen: list[tuple[int, torch.Tensor]] = []  # (seed, state) at each draw the function reseeded
        self.unseeded_draws = False
        self.found: tuple[int, bool] | None = None

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)  # type: ignore[no-untyped-call]
        with _disable_current_modes():  # the fake mode below is still active
            final, seed = torch.random.get_rng_state(), torch.initial_seed()
            torch.random.set_rng_state(self.state)
            if exc[0] is None:
                self._judge(final, seed)

    def _judge(self, final: torch.Tensor, seed: int) -> None:
        restored = torch.equal(final, self.state)
        if not self.seen:
            if not restored:  # seeded with no draw after it: the same as seeding before them, if there are none
                if self.unseeded_draws:
                    raise UnsupportedOperatorError(_RESEEDED)
                self.found = self._one_seed(seed, final, restores=False)
            return
        first_seed, first_state = self.seen[0]
        if self.unseeded_draws or any(not torch.equal(state, first_state) for _, state in self.seen):
            raise UnsupportedOperatorError(_RESEEDED)
        if not restored and not torch.equal(final, first_state):
            raise UnsupportedOperatorError(_RESEEDED)
        self.found = self._one_seed(first_seed, first_state, restores=restored)

    @staticmethod
    def _one_seed(seed: int, state: torch.Tensor, restores: bool) -> tuple[int, bool]:
        if not torch.equal(state, _seeded_state(seed)):
            raise UnsupportedOperatorError(_RESEEDED)  # a state set otherwise (set_rng_state)
        return seed, restores

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded in func.tags and kwargs.get("generator") is None:
            with _disable_current_modes():
                state, seed = torch.random.get_rng_state(), torch.initial_seed()
                if torch.equal(state, self.state) and seed == self.seed:
                    self.unseeded_draws = True
                else:
                    self.seen.append((seed, state))
        return func(*args, **kwargs)
