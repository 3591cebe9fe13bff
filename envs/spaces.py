"""Gymnasium spaces for chat environments: free text actions and message-list observations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["AssistantText", "Message", "MessagesSpace"]

Message = dict[str, str]

_SAMPLE_WORDS = ("what", "is", "the", "answer", "tool", "call", "python", "42", "print", "x")


class AssistantText(spaces.Text):
    """Any Unicode string up to `max_length` characters: one assistant turn.

    `gymnasium.spaces.Text` only contains strings over a fixed character set, but a model can
    write any character, so `contains` accepts all text within the length bounds. `sample`
    draws a short string (at most `SAMPLE_MAX_LENGTH` characters) from Text's alphanumeric
    set: a reproducible turn with no tool call, of a length a model would write.
    """

    SAMPLE_MAX_LENGTH = 256

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        length = int(self.np_random.integers(self.min_length, min(self.max_length,
                                                                  self.SAMPLE_MAX_LENGTH) + 1))
        return super().sample(mask=(length, None))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AssistantText(max_length={self.max_length})"


class MessagesSpace(spaces.Space[list[Message]]):
    """Lists of chat messages `{"role": ..., "content": ..., optionally "name": ...}`.

    An element is a list of at most `max_messages` dicts whose `role` is one of `roles`, whose
    `content` is a string of at most `max_content_length` characters and whose only other
    allowed key is `name` (a string, used on tool messages).
    """

    def __init__(
        self,
        roles: Sequence[str] = ("system", "user", "assistant", "tool"),
        max_messages: int = 64,
        max_content_length: int = 1_000_000,
        seed: int | np.random.Generator | None = None,
    ):
        self.roles = tuple(roles)
        self.max_messages = max_messages
        self.max_content_length = max_content_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if not isinstance(x, list) or len(x) > self.max_messages:
            return False
        return all(self._is_message(message) for message in x)

    def _is_message(self, message: Any) -> bool:
        if not isinstance(message, dict) or not {"role", "content"} <= message.keys():
            return False
        if not message.keys() <= {"role", "content", "name"}:
            return False
        return (
            message["role"] in self.roles
            and isinstance(message["content"], str)
            and len(message["content"]) <= self.max_content_length
            and isinstance(message.get("name", ""), str)
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[Message]:
        if mask is not None or probability is not None:
            raise NotImplementedError("MessagesSpace.sample takes no mask or probability")
        count = int(self.np_random.integers(1, min(self.max_messages, 4) + 1))
        messages = []
        for _ in range(count):
            role = self.roles[int(self.np_random.integers(len(self.roles)))]
            words = self.np_random.choice(_SAMPLE_WORDS, size=int(self.np_random.integers(1, 8)))
            messages.append({"role": role, "content": " ".join(str(word) for word in words)})
        return messages

    def __repr__(self) -> str:
        return f"MessagesSpace(roles={self.roles}, max_messages={self.max_messages})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, MessagesSpace)
            and self.roles == other.roles
            and self.max_messages == other.max_messages
            and self.max_content_length == other.max_content_length
        )
