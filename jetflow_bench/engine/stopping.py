"""Stop rules applied identically in every arm.

Whether and where a sequence stops is a pure function of its generated tokens (never of how
they were grouped into steps), so the AR baseline and every drafter truncate at the same token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StopRule:
    max_new_tokens: int
    eos_token_ids: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    decode: Callable[[Sequence[int]], str] | None = None  # needed only with stop strings
    window: int = 16  # tokens decoded before each candidate end for stop-string matching

    def find_end(self, generated: Sequence[int], checked: int) -> tuple[int, str] | None:
        """First end (exclusive) at or after token ``checked``, with the reason, or None.

        ``generated`` counts from the first new token; tokens before ``checked`` were checked
        already. Reasons: "eos", "stop" (a stop string ends in the text), "length".
        """
        for k in range(checked, len(generated)):
            if generated[k] in self.eos_token_ids:
                return k + 1, "eos"
            if self.stop_strings and self._ends_with_stop(generated, k + 1):
                return k + 1, "stop"
            if k + 1 >= self.max_new_tokens:
                return k + 1, "length"
        return None

    def _ends_with_stop(self, generated: Sequence[int], end: int) -> bool:
        if self.decode is None:
            raise ValueError("stop strings need a decode function")
        # Ends are checked in order and the first hit stops, so looking at a short decoded tail
        # is enough; the tail depends only on the tokens, never on the step grouping.
        window = max(self.window, *(len(s) for s in self.stop_strings))  # a token is >= 1 character
        tail = self.decode(generated[max(0, end - window) : end])
        return any(s in tail for s in self.stop_strings)
