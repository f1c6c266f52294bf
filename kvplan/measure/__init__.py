"""`kvplan measure`: microbenchmarks on the local device that check the planner's predictions.
Needs torch (the `measure` extra); nothing on the planning path imports this package."""
