"""What an engine's HTTP server does with a request longer than its max_model_len: the one home
of the rule, by engine and release, that `kvplan simulate` and `plan` apply to every request
the bench client sends (kvplan.simulate.cluster, kvplan.simulate.disagg).

The bench clients (`vllm bench serve`, `sglang.bench_serving`) send max_tokens = the request's
output length, so the server sees prompt + max_tokens:

- vLLM, every release kvplan models (0.6 to 0.24): the OpenAI server refuses with HTTP 400 when
  prompt + max_tokens > max_model_len, before anything reaches the engine
  (entrypoints/openai/serving_engine.py `_validate_input` through the 0.1x releases, "This
  model's maximum context length is ... However, you requested ..."; 0.19.1
  entrypoints/openai/engine/serving.py, the same check). `get_max_tokens` (the clamp to
  max_model_len - prompt) runs after that check and lowers only a max_tokens the client left
  out or the server's default, so a bench request is refused, never clamped; a total of
  exactly max_model_len is served.
- SGLang from 0.4.2 (PR #2876, merged 2025-01-16): TokenizerManager._validate_one_request
  refuses a prompt of context_len tokens or more, and prompt + max_new_tokens >= context_len
  ("Requested token count exceeds the model's maximum context length", HTTP 400); PR #22546
  (merged 2026-04-10) serves a total of exactly context_len (`>`). kvplan takes 0.5.10 as the
  first release with it (the first it knows with April 2026's changes; the tag is not
  checked) and the bare 0.5 (main, April 2026) as after it.
- SGLang 0.4.0 and 0.4.1: no total check; the scheduler lowers max_new_tokens to what the
  context leaves (the users of PR #2876 asked to stay on 0.4.1 for that), so those requests
  are served with fewer output tokens (note sim-outputs-capped).
- SGLang, every release (the reserve of PR #1748, October 2024): the scheduler takes
  max_req_len = min(context_len - 1, pool tokens - 1) and cuts max_new_tokens to
  max_req_len - prompt - 1 (scheduler.py handle_generate_request / init_req_max_new_tokens),
  so a served request holds at most context_len - 2 tokens: one the tokenizer lets through
  within 2 tokens of the limit generates fewer than it asked (SGLang PR #33814's repro,
  --context-length 4096 asking 16: prompt 4079 gets 15, 4080 gets 14; note sim-outputs-capped).
  Its scheduler also refuses a prompt of max_req_input_len = max_req_len - 5 tokens or more
  (validate_input_length, an aborted request: HTTP 400), the limit a pool below the context
  length sets (note sim-sglang-pool-caps).
"""

from __future__ import annotations

from kvplan.record import NamedTuple

SGLANG_TOTAL_AT_LIMIT_FROM = 10  # the 0.5 patch that serves prompt + output == context_len
SGLANG_TOTAL_CHECK_FROM_04 = 2  # the 0.4 patch whose tokenizer refuses the total (PR #2876)
# tokens of its context_len (or pool) SGLang's scheduler never lets a request hold:
# max_req_len = context_len - 1, max_new_tokens <= max_req_len - prompt - 1
SGLANG_SCHEDULER_RESERVE_TOKENS = 2
SGLANG_PROMPT_MARGIN_TOKENS = 5  # max_req_input_len = max_req_len - 5 (scheduler.py)


def sglang_max_req_len(context_tokens: int) -> int:
    """SGLang's max_req_len against a context_len, or a pool, of `context_tokens`."""
    return context_tokens - 1


def sglang_longest_request(context_tokens: int) -> int:
    """The most tokens (prompt + output) SGLang's scheduler lets a request hold against a
    context_len, or a pool, of `context_tokens` (max_req_len - 1)."""
    return context_tokens - SGLANG_SCHEDULER_RESERVE_TOKENS


def sglang_prompt_limit(context_tokens: int) -> int:
    """The prompt length from which SGLang's scheduler refuses a request (max_req_input_len,
    validate_input_length: `>=`) against a context_len, or a pool, of `context_tokens`."""
    return sglang_max_req_len(context_tokens) - SGLANG_PROMPT_MARGIN_TOKENS


class ContextLimit(NamedTuple):
    """A server's rule for requests against max_model_len (context_limit)."""

    max_model_len: int  # the length the HTTP server checks requests against
    total_at_limit: bool = True  # prompt + output == max_model_len is served (else refused)
    caps: bool = False  # the output is lowered to what the context leaves, not refused
    # the tokens a request may hold in the engine where fewer than max_model_len (SGLang's
    # pool below the context length: its scheduler's max_req_len cut, setup's
    # sim-sglang-pool-caps); None: max_model_len
    engine_len: int | None = None
    # the prompt length from which the engine's scheduler refuses a request where below
    # `longest` (SGLang's max_req_input_len); None: `longest`
    prompt_limit: int | None = None

    @property
    def longest(self) -> int:
        """The most tokens (prompt + output) a served request holds in the engine."""
        return self.max_model_len if self.engine_len is None else self.engine_len

    def refuses(self, input_tokens: int, output_tokens: int) -> bool:
        """Whether the server answers the request with HTTP 400 (a failed request)."""
        if input_tokens >= min(self.longest, self.prompt_limit or self.longest):
            return True
        if self.caps:
            return False
        total = input_tokens + output_tokens
        return total > self.max_model_len if self.total_at_limit else total >= self.max_model_len

    def output_tokens(self, input_tokens: int, output_tokens: int) -> int:
        """The tokens a served request generates: the ones asked, lowered to what the context
        leaves where the server caps, and to what the engine lets a request hold."""
        return min(output_tokens, self.longest - input_tokens)

    def capped(self, input_tokens: int, output_tokens: int) -> bool:
        """Whether a served request generates fewer tokens than it asked for."""
        return not self.refuses(input_tokens, output_tokens) and (
            self.output_tokens(input_tokens, output_tokens) < output_tokens
        )


def context_limit(
    engine: str,
    version: str,
    max_model_len: int,
    engine_len: int | None = None,
    pool_tokens: int | None = None,
) -> ContextLimit:
    """The rule of `engine`'s HTTP server at release `version` (as given, patch included;
    the module's docstring has the source of each) for a server of `max_model_len`, whose
    engine holds at most `engine_len` tokens a request where fewer; `pool_tokens`: SGLang's
    KV pool (max_total_num_tokens), where its scheduler's limits come from it."""
    held = None if engine_len is None or engine_len >= max_model_len else engine_len
    if engine != "sglang":
        return ContextLimit(max_model_len, engine_len=held)
    from kvplan.engines.sglang import sglang_rules

    held = min(sglang_longest_request(max_model_len), max_model_len if held is None else held)
    prompts = sglang_prompt_limit(min(max_model_len, pool_tokens or max_model_len))
    rules = sglang_rules(version)
    if rules.release == "0.4":
        early = rules.patch is not None and rules.patch < SGLANG_TOTAL_CHECK_FROM_04
        return ContextLimit(
            max_model_len, total_at_limit=False, caps=early, engine_len=held, prompt_limit=prompts
        )
    at_limit = rules.from_05(SGLANG_TOTAL_AT_LIMIT_FROM)
    return ContextLimit(
        max_model_len, total_at_limit=at_limit, engine_len=held, prompt_limit=prompts
    )
