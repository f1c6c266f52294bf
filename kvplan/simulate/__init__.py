"""A discrete-event simulation of an LLM serving engine (vLLM V1's scheduler) serving a request
stream: `workload` (what clients send), `engine` (one replica: scheduler, KV blocks, steps),
`cluster` (clients, router, replicas and their API servers in one clock), `metrics` (what
`vllm bench serve` reports). kvplan.plans.simulate and kvplan.plans.plan drive it."""
