"""An OpenAI-compatible chat-completions endpoint in front of a rollout actor's engine.

Each episode has its own base URL, `<root>/episodes/<key>/v1`, so any client that takes a
`base_url` (the `openai` package, and what is built on it) plays one episode without knowing it.
Requests are sampled by the actor (`RolloutActor.sample_turn`) with the rollout's sampling
settings, seeds and weights, and recorded token-exactly by a `ChatEpisode`; `finish_episode`
turns the record into the same `Trajectory` the env loop produces.

The server runs on the event loop of the engine it serves (AsyncLLM's output handler belongs to
that loop). Agent code must not: a blocking client there would stall every episode's decoding.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agent_rl.rollout.chat_episode import ChatEpisode, EpisodeEndedError, HistoryMismatchError
from agent_rl.rollout.episode import SampledTurn, turn_seed
from agent_rl.rollout.openai_messages import Message, MessageFormatError, streamable_content
from agent_rl.trajectory import Trajectory

if TYPE_CHECKING:
    from agent_rl.rollout.actor import RolloutActor

logger = logging.getLogger(__name__)

T = TypeVar("T")


DISCONNECT_POLL_S = 0.25  # how often a waiting request checks that its client is still there
MAX_TOP_LOGPROBS = 20  # the engine's own bound (vLLM's max_logprobs), and OpenAI's


class UnknownEpisodeError(KeyError):
    """A key that names no open episode of this endpoint."""


class ClientGoneError(ConnectionError):
    """The client disconnected before its turn was sampled."""


@dataclass
class ServedEpisode:
    """An open episode: its record, its seed, the lock that keeps its requests in order (two
    requests of one episode at once cannot both extend one history) and the requests under way,
    which finishing the episode cancels."""

    chat: ChatEpisode
    seed: int | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    in_flight: set[asyncio.Future[Any]] = field(default_factory=set)
    fault: BaseException | None = None  # an injected fault one of its requests got


class OpenAIEndpoint:
    """Serves `POST <root>/episodes/<key>/v1/chat/completions` for one rollout actor.

    Use: `root = await endpoint.start()`, then per episode `key = endpoint.open_episode(...)`,
    hand `endpoint.base_url(key)` to the agent, and `endpoint.finish_episode(key, reward, ...)`
    when it is done. All on the actor's event loop.

    Args:
        actor: a started `RolloutActor` (in this process).
        model_name: the model name the responses report.
    """

    def __init__(self, actor: RolloutActor, model_name: str = "agent-rl") -> None:
        self.actor = actor
        self.model_name = model_name
        self.root = ""
        self._episodes: dict[str, ServedEpisode] = {}
        self._server: _EmbeddedServer | None = None
        self._serving: asyncio.Task[None] | None = None
        self.app = self._build_app()

    def open_episode(self, task_id: str = "", category: str = "", seed: int | None = None) -> str:
        """Start recording an episode; returns its key (see `base_url`)."""
        key = uuid.uuid4().hex
        chat = ChatEpisode(
            self.actor.tokenizer, task_id, category,
            context_budget=self.actor.context_budget,
            pass_tools_to_template=self.actor.config.pass_tools_to_template,
            new_segments=self.actor.config.agent_history == "new_segment",
        )
        self._episodes[key] = ServedEpisode(chat, seed)
        return key

    def base_url(self, key: str) -> str:
        """The `base_url` an OpenAI client uses to play episode `key`."""
        return f"{self.root}/episodes/{key}/v1"

    def turns(self, key: str) -> int:
        """Assistant turns sampled so far in episode `key`."""
        return self._served(key).chat.num_turns

    def fault(self, key: str) -> BaseException | None:
        """The fault injected into one of episode `key`'s requests, if any: the episode then
        ends by it, whatever its agent made of the error."""
        return self._served(key).fault

    def _injected_fault(self) -> BaseException | None:
        """A run's `faults.env_raise_every` reaches agent episodes here: the actor's env factory
        (`agent_rl.orchestrate.faults.FaultyEnvFactory`) counts requests as it counts env steps."""
        due = getattr(self.actor, "request_fault", None)
        return due() if due is not None else None

    def finish_episode(self, key: str, reward: float, group_id: str,
                       info: Mapping[str, Any] | None = None,
                       end_reason: str | None = None) -> list[Trajectory]:
        """Close episode `key` and return its trajectory, or one per segment (see
        `ChatEpisode.finish`); later requests to it get 404."""
        served = self._served(key)
        del self._episodes[key]
        for request in served.in_flight:
            request.cancel()
        return served.chat.finish(reward, group_id, self.actor.sampling_record(served.seed),
                                  info, end_reason)

    def _served(self, key: str) -> ServedEpisode:
        served = self._episodes.get(key)
        if served is None:
            raise UnknownEpisodeError(f"no open episode {key!r}")
        return served

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on this event loop (port 0: any free port); returns the root URL."""
        config = uvicorn.Config(self.app, host=host, port=port, log_level="warning",
                                lifespan="off")
        self._server = _EmbeddedServer(config)
        self._serving = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._serving.done():
                raise RuntimeError(f"the endpoint could not listen on {host}:{port} (see the "
                                   "log above); choose another port")
            await asyncio.sleep(0.01)
        bound_port = self._server.servers[0].sockets[0].getsockname()[1]
        self.root = f"http://{host}:{bound_port}"
        logger.info("OpenAI-compatible endpoint at %s", self.root)
        return self.root

    async def stop(self) -> None:
        """Stop serving; open episodes are dropped."""
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            await self._serving
        self._server = self._serving = None
        self._episodes.clear()

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="agent-rl OpenAI-compatible endpoint")

        @app.post("/episodes/{key}/v1/chat/completions")
        async def chat_completions(key: str, request: Request) -> Any:
            try:
                body = await request.json()
            except json.JSONDecodeError as error:
                return _error(400, f"the request body is not JSON ({error})", None)
            served = self._episodes.get(key)
            if served is None:
                return _error(404, f"no open episode {key!r}; it was finished or never opened",
                              None, code="episode_not_found")
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                return _error(400, "the request needs a list of messages", "messages")
            if body.get("n", 1) != 1:
                return _error(400, "n must be 1: an episode is one conversation", "n")
            limit = body.get("max_completion_tokens") or body.get("max_tokens")
            if limit is not None and not (isinstance(limit, int) and limit > 0):
                return _error(400, f"max_tokens must be a positive integer, got {limit!r}",
                              "max_tokens")
            top = body.get("top_logprobs") or 0
            if not (isinstance(top, int) and 0 <= top <= MAX_TOP_LOGPROBS):
                return _error(400, f"top_logprobs must be an integer from 0 to "
                                   f"{MAX_TOP_LOGPROBS}, got {top!r}", "top_logprobs")
            if top and not body.get("logprobs"):
                return _error(400, "top_logprobs needs logprobs: true", "top_logprobs")
            if (fault := self._injected_fault()) is not None:
                served.fault = fault
                return _error(500, f"injected fault: {fault}", None, code="injected_fault",
                              kind="server_error")
            feed = _TokenFeed() if body.get("stream") else None
            work = asyncio.ensure_future(self._complete(served, body, feed))
            served.in_flight.add(work)
            streaming = False
            try:
                if feed is None:
                    return JSONResponse(await _unless_disconnected(request, work))
                # Refusals come as errors, not as a stream: wait for the first tokens.
                await _unless_disconnected(request, asyncio.ensure_future(
                    _first_of(work, feed.changed.wait())))
                if work.done():
                    _outcome(work)
                streaming = True  # the stream owns `work` from here
                return StreamingResponse(self._stream(served, work, feed, body),
                                         media_type="text/event-stream")
            except ClientGoneError:
                return JSONResponse(status_code=499, content=None)
            except (MessageFormatError, EpisodeEndedError) as error:
                return _refusal(error)
            finally:
                if not streaming:
                    if not work.done():
                        work.cancel()  # the client went away before the first tokens
                    served.in_flight.discard(work)

        @app.get("/episodes/{key}/v1/models")
        async def models(key: str) -> Any:
            # Some clients list the models before their first request.
            return {"object": "list", "data": [{"id": self.model_name, "object": "model",
                                                "created": 0, "owned_by": "agent-rl"}]}

        return app

    async def _complete(self, served: ServedEpisode, body: dict[str, Any],
                        feed: _TokenFeed | None = None) -> dict[str, Any]:
        async with served.lock:
            chat = served.chat
            before = chat.mark()
            prompt = list(chat.prompt_ids(body["messages"], body.get("tools")))
            room = chat.room()
            requested = body.get("max_completion_tokens") or body.get("max_tokens")
            if requested:
                room = min(room, int(requested))
            top = {"top_logprobs": body["top_logprobs"]} if body.get("top_logprobs") else {}
            try:
                turn = await self.actor.sample_turn(
                    prompt, room, turn_seed(served.seed, chat.num_turns), on_tokens=feed, **top)
            except BaseException:
                chat.rollback(before)
                raise
            message = chat.add_turn(turn)
        return self._response(message, turn, len(prompt), bool(body.get("logprobs")))

    async def _stream(self, served: ServedEpisode, work: asyncio.Future[dict[str, Any]],
                      feed: _TokenFeed, body: dict[str, Any]) -> AsyncIterator[str]:
        """The turn as server-sent chunks: content as it is sampled (held back where a tool call
        may begin), then the rest of the message, its tool calls and logprobs. The episode then
        compares the client's next history with the content the chunks added up to."""
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": self.model_name}
        sent = ""
        try:
            yield _chunk(head, {"role": "assistant", "content": ""})
            while not work.done():
                await _first_of(work, feed.changed.wait())
                feed.changed.clear()
                text = streamable_content(self.actor.tokenizer.decode(
                    feed.ids, skip_special_tokens=True))
                if text.startswith(sent) and len(text) > len(sent):
                    yield _chunk(head, {"content": text[len(sent):]})
                    sent = text
            try:
                response = _outcome(work)
            except EpisodeEndedError as error:
                yield _event({"error": {"message": str(error), "type": "invalid_request_error",
                                        "param": None, "code": "episode_ended"}})
                return
            async for event in _stream_rest(head, response, sent, body, served.chat):
                yield event
        finally:
            if not work.done():
                work.cancel()  # the client went away mid-stream: abort the engine request
            served.in_flight.discard(work)

    def _response(self, message: Message, turn: SampledTurn, prompt_tokens: int,
                  logprobs: bool) -> dict[str, Any]:
        finish = "tool_calls" if message.get("tool_calls") else turn.finish_reason
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish,
                                  "logprobs": None}
        if logprobs:
            choice["logprobs"] = {"content": self._token_logprobs(turn)}
        completion = len(turn.token_ids)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": self.model_name, "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                      "total_tokens": prompt_tokens + completion},
        }

    def _token_logprobs(self, turn: SampledTurn) -> list[dict[str, Any]]:
        """Every sampled token with its behavior logprob, the closing stop token included (it
        is trained on too), and the alternatives the request asked for."""
        tops = turn.top_logprobs or [[] for _ in turn.token_ids]
        return [{**self._token_entry(token_id, logprob),
                 "top_logprobs": [self._token_entry(*pair) for pair in top]}
                for token_id, logprob, top in zip(turn.token_ids, turn.logprobs, tops, strict=True)]

    def _token_entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self.actor.tokenizer.decode([token_id])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


class _EmbeddedServer(uvicorn.Server):
    """uvicorn's server without its signal handlers: the process that embeds the endpoint (a
    trainer, a Ray actor) owns SIGINT and SIGTERM."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


async def _unless_disconnected(request: Request, task: asyncio.Future[T]) -> T:
    """`task`'s result, or ClientGoneError once the client disconnects: `task` is then
    cancelled, which aborts its request in the engine (AsyncLLM aborts a cancelled
    generation), so a client that gives up leaves no orphan request decoding on. A task
    cancelled by `finish_episode` gives EpisodeEndedError."""
    while True:
        done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
        if done:
            return _outcome(task)
        if await request.is_disconnected():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise ClientGoneError("the client disconnected while its turn was sampled")


async def _stream_rest(head: dict[str, Any], response: dict[str, Any], sent: str,
                       body: dict[str, Any], chat: ChatEpisode) -> AsyncIterator[str]:
    """The chunks after the streamed content: the content's rest, the tool calls, the finish."""
    choice = response["choices"][0]
    message = choice["message"]
    content = message.get("content") or ""
    rest = content[len(sent):] if content.startswith(sent) else ""
    chat.received_as({**message, "content": sent + rest or None})
    delta: dict[str, Any] = {"content": rest} if rest else {}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": index, **call}
                               for index, call in enumerate(message["tool_calls"])]
    yield _chunk(head, delta, logprobs=choice["logprobs"])
    yield _chunk(head, {}, finish_reason=choice["finish_reason"])
    if (body.get("stream_options") or {}).get("include_usage"):
        yield _event({**head, "choices": [], "usage": response["usage"]})
    yield "data: [DONE]\n\n"


def _chunk(head: dict[str, Any], delta: dict[str, Any], logprobs: Any = None,
           finish_reason: str | None = None) -> str:
    return _event({**head, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                                        "finish_reason": finish_reason}]})


class _TokenFeed:
    """The ids a streamed turn has sampled so far, and an event set when they grow."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.changed = asyncio.Event()

    def __call__(self, ids: list[int]) -> None:
        self.ids = ids
        self.changed.set()


def _outcome(task: asyncio.Future[T]) -> T:
    """A finished request's result; one that `finish_episode` cancelled is an ended episode."""
    if task.cancelled():
        raise EpisodeEndedError("the episode was finished while this turn was sampled")
    return task.result()


async def _first_of(work: asyncio.Future[Any], signal: Awaitable[Any]) -> None:
    """Wait until `work` is done or `signal` fires, whichever is first."""
    waiter = asyncio.ensure_future(signal)
    try:
        await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def _refusal(error: MessageFormatError | EpisodeEndedError) -> JSONResponse:
    if isinstance(error, MessageFormatError):
        code = "history_mismatch" if isinstance(error, HistoryMismatchError) else "invalid_message"
        return _error(400, str(error), f"messages[{error.index}]", code=code)
    return _error(400, str(error), "messages", code="episode_ended")


def _event(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def _error(status: int, message: str, param: str | None,
           code: str | None = None, kind: str = "invalid_request_error") -> JSONResponse:
    """An error in OpenAI's shape, so clients raise their usual exception with our message."""
    return JSONResponse(status_code=status, content={"error": {
        "message": message, "type": kind, "param": param, "code": code}})
