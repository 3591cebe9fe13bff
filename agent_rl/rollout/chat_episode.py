"""One episode played by an outside agent through chat requests, recorded token-exactly.

The agent sends its whole conversation with every request. The episode keeps every message it
has seen and returned with the ids behind them, so a request that repeats that history unchanged
and adds new messages costs only the ids of the new messages, rendered as the env loop renders an
environment's reply (`EpisodeTokens.add_env`); the sampled ids of earlier turns are never
re-tokenized. A request whose history differs from what the episode holds (an edited, dropped or
reordered message) is refused with `HistoryMismatchError` naming the first differing message:
re-rendering it would silently give the learner ids the model never sampled. With `new_segments`
such a request instead closes the episode's current segment and opens a new one on the request's
messages, rendered afresh as its prompt: nothing sampled is re-tokenized, since each segment is
its own sequence and the learner trains only the turns sampled in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_rl.rollout.chat_tokens import ChatTokens, EpisodeTokens
from agent_rl.rollout.episode import EpisodeRecord, SampledTurn
from agent_rl.rollout.openai_messages import (
    Message,
    MessageFormatError,
    TurnKey,
    assistant_message,
    call_names,
    env_loop_message,
    opening_messages,
    turn_key,
)
from agent_rl.trajectory import END_CONTEXT_BUDGET, END_TERMINATED, SEGMENT, Trajectory
from envs.tools import ANSWER_TOOL_NAME


class HistoryMismatchError(MessageFormatError):
    """The request's history is not the one this episode returned; `index` is the first message
    that differs (or the first one missing)."""


class EpisodeEndedError(RuntimeError):
    """A request came after the episode ran out of context or was finished."""


@dataclass(frozen=True)
class EpisodeMark:
    """Where an episode stood before a request (see `ChatEpisode.rollback`)."""

    tokens: EpisodeTokens | None
    history_length: int
    ids_length: int
    seen: list[TurnKey]
    tools: list[dict[str, Any]] | None
    record: EpisodeRecord
    segments: int


class ChatEpisode:
    """The token record of one agent episode, grown one chat request at a time.

    Args:
        tokenizer: the engine's tokenizer (its chat template renders the messages).
        task_id, category: what the trajectory is labelled with.
        context_budget: most tokens in the episode, as in the env loop.
        pass_tools_to_template: also give the tool schemas to the template as `tools=`, as the
            env loop does with `RolloutConfig.pass_tools_to_template`.
        new_segments: a history that differs from the episode's starts a new segment instead of
            being refused (`RolloutConfig.agent_history: new_segment`).
    """

    def __init__(self, tokenizer: Any, task_id: str = "", category: str = "", *,
                 context_budget: int, pass_tools_to_template: bool = True,
                 new_segments: bool = False) -> None:
        self.tokenizer = tokenizer
        self.context_budget = context_budget
        self.pass_tools_to_template = pass_tools_to_template
        self.new_segments = new_segments
        self.record = EpisodeRecord(task_id=task_id, category=category)
        # earlier segments' records, and why each one was closed
        self.segments: list[EpisodeRecord] = []
        self.segment_reasons: list[str] = []
        self.ended = False
        self._tokens: EpisodeTokens | None = None
        self._tools: list[dict[str, Any]] | None = None
        self._seen: list[TurnKey] = []
        self._call_names: dict[str, str] = {}

    @property
    def num_turns(self) -> int:
        """Turns sampled in the whole episode, every segment's."""
        return self.record.num_turns + sum(record.num_turns for record in self.segments)

    def prompt_ids(self, messages: Sequence[Message],
                   tools: Sequence[Mapping[str, Any]] | None) -> list[int]:
        """The episode's ids after taking in `messages`: the ids to sample the next turn from.

        Raises:
            HistoryMismatchError: `messages` does not start with the history the episode holds.
            MessageFormatError: a message this endpoint cannot read.
            EpisodeEndedError: the episode has no room left or was finished.
        """
        if self.ended:
            raise EpisodeEndedError("this episode has ended (its context budget is used up or "
                                    "it was finished); start a new episode")
        keys = [turn_key(message, index) for index, message in enumerate(messages)]
        tool_list = [dict(tool) for tool in tools] if tools else None
        if self._tokens is None:
            self._open(messages, keys, tool_list)
        else:
            self._continue(messages, keys, tool_list)
        return self.record.token_ids

    def mark(self) -> EpisodeMark:
        """The episode's state now, to return to if the coming request is abandoned."""
        history = len(self._tokens.history) if self._tokens is not None else 0
        return EpisodeMark(self._tokens, history, len(self.record.token_ids), self._seen,
                           self._tools, self.record, len(self.segments))

    def rollback(self, mark: EpisodeMark) -> None:
        """Forget what `prompt_ids` took in since `mark`: its turn was never sampled (the client
        went away, or the engine failed), so the same request may be sent again. A finished
        episode stays as it was: its trajectory is out."""
        if self.ended:
            return
        self.record = mark.record
        del self.segments[mark.segments:], self.segment_reasons[mark.segments:]
        self._tokens = mark.tokens
        if mark.tokens is not None:
            del mark.tokens.history[mark.history_length:]
        self.record.truncate(mark.ids_length)
        self._seen = mark.seen
        self._tools = mark.tools

    def add_turn(self, turn: SampledTurn) -> Message:
        """Record a sampled turn and return it as the OpenAI assistant message to send.

        Raises:
            EpisodeEndedError: the episode was finished while the turn was sampled (its agent
                ran out of time); its trajectory is already out and must not change.
        """
        assert self._tokens is not None, "prompt_ids comes before add_turn"
        if self.ended:
            raise EpisodeEndedError("the episode was finished while this turn was sampled")
        self.record.append_sampled(turn)
        text = self._tokens.add_assistant(turn.token_ids, turn.stop_token)
        message = assistant_message(text)
        self.record.tool_calls += sum(1 for call in message.get("tool_calls") or []
                                      if call["function"]["name"] != ANSWER_TOOL_NAME)
        self._seen.append(turn_key(message, len(self._seen)))
        self._call_names.update(call_names(message))
        if turn.stop_token is None and len(self.record.token_ids) >= self.context_budget:
            self._end(END_CONTEXT_BUDGET)
        return message

    def received_as(self, message: Message) -> None:
        """The last turn reached the client as `message` (a stream's deltas added up), which is
        what it will send back: compare its next history with that."""
        self._seen[-1] = turn_key(message, len(self._seen) - 1)

    def room(self) -> int:
        """Tokens the next turn may have before the episode's context budget is reached."""
        return self.context_budget - len(self.record.token_ids)

    def finish(self, reward: float, group_id: str, sampling: dict[str, Any],
               info: Mapping[str, Any] | None = None,
               end_reason: str | None = None) -> list[Trajectory]:
        """End the episode with the agent's reward: its trajectory, or one per segment, each
        with the reward, the last with the episode's end, turns and tool calls. It ends as
        `end_reason` if given, else as terminated unless it already ran out of context."""
        if end_reason is not None:
            self._end(end_reason)
        elif not self.ended:
            self._end(END_TERMINATED)
        records = [*self.segments, self.record]
        self.record.num_turns = self.num_turns
        self.record.info.update(info or {})
        for index, (record, reason) in enumerate(zip(records, [*self.segment_reasons, None],
                                                     strict=True)):
            record.reward = float(reward)
            if len(records) > 1:
                record.info[SEGMENT] = {"index": index, "count": len(records),
                                        **({"closed_by": reason} if reason else {})}
        for record in self.segments:
            record.end_reason = self.record.end_reason
        return [record.to_trajectory(group_id, sampling) for record in records]

    def _open(self, messages: Sequence[Message], keys: list[TurnKey],
              tools: list[dict[str, Any]] | None) -> None:
        if not messages:
            raise MessageFormatError(0, "the first request of an episode needs messages")
        opening = opening_messages(messages, tools, self._call_names)
        chat = ChatTokens(self.tokenizer, tools=tools if self.pass_tools_to_template else None)
        self._tokens = EpisodeTokens(chat, opening)
        self._tools = tools
        self._seen = keys
        self._feed(self._tokens.opening_ids)

    def _continue(self, messages: Sequence[Message], keys: list[TurnKey],
                  tools: list[dict[str, Any]] | None) -> None:
        try:
            self._check_history(keys, tools)
        except HistoryMismatchError as error:
            if not self.new_segments:
                raise
            self._start_segment(messages, keys, tools, error)
            return
        assert self._tokens is not None
        new = [env_loop_message(message, index, self._call_names)
               for index, message in enumerate(messages) if index >= len(self._seen)]
        ids = self._tokens.add_env(new)
        self._seen = keys
        if len(self.record.token_ids) + len(ids) >= self.context_budget:
            self._end(END_CONTEXT_BUDGET)
            raise EpisodeEndedError(f"the new messages take {len(ids)} tokens and the episode "
                                    f"has {self.room()} left of its {self.context_budget}; the "
                                    "episode ends here")
        self._feed(ids)

    def _start_segment(self, messages: Sequence[Message], keys: list[TurnKey],
                       tools: list[dict[str, Any]] | None, reason: HistoryMismatchError) -> None:
        """Close the current segment and open the next on `messages`, its prompt rendered
        from them as a first request's is."""
        closed = self.record
        self.segments.append(closed)
        self.segment_reasons.append(str(reason))
        self.record = EpisodeRecord(task_id=closed.task_id, category=closed.category)
        self.record.tool_calls = closed.tool_calls  # the episode's running total
        self._tokens = None
        self._open(messages, keys, tools)

    def _check_history(self, keys: list[TurnKey], tools: list[dict[str, Any]] | None) -> None:
        if tools != self._tools:
            raise HistoryMismatchError(0, "the tools differ from the first request's; an "
                                          "episode's tool schemas are in its system prompt and "
                                          "cannot change")
        for index, (seen, sent) in enumerate(zip(self._seen, keys, strict=False)):
            if seen != sent:
                raise HistoryMismatchError(index, _difference(seen, sent))
        if len(keys) <= len(self._seen):
            raise HistoryMismatchError(len(keys), f"the request has {len(keys)} messages, the "
                                                  f"episode's history {len(self._seen)}; send "
                                                  "the whole history plus at least one new "
                                                  "message")

    def _feed(self, ids: list[int]) -> None:
        self.record.feed(ids)
        if self.room() <= 0:
            self._end(END_CONTEXT_BUDGET)
            raise EpisodeEndedError(f"the prompt takes {len(self.record.token_ids)} tokens, the "
                                    f"context budget is {self.context_budget}")

    def _end(self, reason: str) -> None:
        self.ended = True
        self.record.end_reason = reason


def _difference(seen: TurnKey, sent: TurnKey) -> str:
    for field in ("role", "content", "calls", "tool_call_id"):
        if getattr(seen, field) != getattr(sent, field):
            return (f"{field} differs from the message this episode holds there "
                    f"({getattr(seen, field)!r:.80} was seen, {getattr(sent, field)!r:.80} "
                    "sent); an episode's history may only grow, since its earlier turns' ids "
                    "were sampled and cannot be re-tokenized")
    return "the message differs"
