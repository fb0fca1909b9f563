"""vLLM's OpenAI-server JSON, byte for byte as vLLM 0.25.1 sends it (pure functions).

Key order and ``null`` fields follow the transcripts in ``tests/fixtures/vllm-0.25.1``.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

SSE_DONE = b"data: [DONE]\n\n"


def dumps(obj: Any) -> bytes:
    """JSON as vLLM (pydantic's ``model_dump_json``) writes it: compact, no spaces."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


def request_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(8)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def completion_chunk(
    rid: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str | None,
    usage_now: dict[str, int] | None,
) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
        "prompt_token_ids": None,
        "token_ids": None,
    }
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
    }
    if usage_now is not None:
        chunk["usage"] = usage_now
    return chunk


def chat_role_chunk(
    rid: str, created: int, model: str, usage_now: dict[str, int] | None
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    if usage_now is not None:
        chunk["usage"] = usage_now
    chunk["prompt_token_ids"] = None
    chunk["prompt_text"] = None
    return chunk


def chat_chunk(
    rid: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str | None,
    usage_now: dict[str, int] | None,
) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "delta": {"content": text},
        "logprobs": None,
        "finish_reason": finish_reason,
    }
    if finish_reason is not None:
        choice["stop_reason"] = None
    choice["token_ids"] = None
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [choice],
    }
    if usage_now is not None:
        chunk["usage"] = usage_now
    return chunk


def final_usage_chunk(
    rid: str, created: int, model: str, chat: bool, usage_total: dict[str, int], fingerprint: str
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage_total,
        "system_fingerprint": fingerprint,
    }


def completion_response(
    rid: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    usage_total: dict[str, int],
    fingerprint: str,
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "token_ids": None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "routed_experts": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": {**usage_total, "prompt_tokens_details": None},
        "kv_transfer_params": None,
        "metrics": None,
    }


def chat_response(
    rid: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    usage_total: dict[str, int],
    fingerprint: str,
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "tool_calls": [],
                    "reasoning": None,
                },
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "token_ids": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": {**usage_total, "prompt_tokens_details": None},
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "kv_transfer_params": None,
    }


def models_response(model: str, created: int, max_model_len: int,
                    root: str | None = None) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": model if root is None else root,
                "parent": None,
                "max_model_len": max_model_len,
                "permission": [
                    {
                        "id": "modelperm-" + secrets.token_hex(8),
                        "object": "model_permission",
                        "created": created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
        ],
    }


def error_response(message: str, code: int = 400, kind: str = "BadRequestError") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
