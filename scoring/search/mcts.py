"""Monte Carlo tree search over steps, with the PRM's step score as the value (no rollouts).

A node is a partial solution. Each simulation walks down from the root by PUCT,

    Q(child) + c_puct * P(child) * sqrt(N(parent)) / (1 + N(child)),

where Q is the mean value backed up through the child (its own PRM value until it is
visited) and P is uniform over siblings, since the generator's step probabilities are not
exposed by every backend. At an unexpanded leaf it samples `expansion_width` next steps, has
the PRM score each child (its value: `aggregation` over the path's step scores) and backs
the best child's value up the route. A complete leaf backs up its own value. After
`simulations` simulations, or when the budget is spent, the best complete solution found
is returned (else the best partial one).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from scoring.generation.generators import Generator
from scoring.search.beam import next_steps, scored
from scoring.search.compute import Budget, BudgetExhausted, Compute, Scorer
from scoring.search.paths import Path, SearchResult, StepOptions, best_path
from steps import arithmetic


@dataclass(eq=False)
class Node:
    path: Path
    value: float  # the PRM's value of this path
    prior: float = 1.0
    children: list[Node] = field(default_factory=list)
    visits: int = 0
    total: float = 0.0

    def puct(self, parent_visits: int, c_puct: float) -> float:
        q = self.total / self.visits if self.visits else self.value
        return q + c_puct * self.prior * math.sqrt(parent_visits) / (1 + self.visits)

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()


def mcts(
    *, problem: str, generator: Generator, scorer: Scorer, budget: Budget | None = None, simulations: int = 16,
    expansion_width: int = 3, c_puct: float = 1.0, aggregation: str = "min", options: StepOptions | None = None,
) -> SearchResult:
    """MCTS with PUCT (module docstring)."""
    arithmetic.check_aggregation(aggregation)
    if simulations < 1 or expansion_width < 1 or c_puct < 0:
        raise ValueError(f"MCTS needs simulations >= 1, expansion_width >= 1, c_puct >= 0 "
                         f"(got {simulations}, {expansion_width}, {c_puct})")
    options, compute = options or StepOptions(), Compute(budget or Budget())
    root, stopped, done = Node(Path(), value=0.0), "done", 0
    try:
        while done < simulations:
            route = _select(root, c_puct)
            leaf = route[-1]
            if not leaf.path.complete:
                _expand(leaf, problem=problem, generator=generator, scorer=scorer, compute=compute,
                        aggregation=aggregation, options=options, width=expansion_width)
            value = max(c.value for c in leaf.children) if leaf.children else leaf.value
            for node in route:
                node.visits += 1
                node.total += value
            done += 1
    except BudgetExhausted:
        stopped = "budget"
    paths = [node.path for node in root.walk() if node is not root]
    complete = [p for p in paths if p.complete and p.steps]
    best = best_path(complete, aggregation) or best_path(paths, aggregation)
    return SearchResult("mcts", aggregation, best, complete, compute.as_dict(), stopped,
                        {"simulations": done, "nodes": len(paths), "expansion_width": expansion_width,
                         "c_puct": c_puct})


def _select(root: Node, c_puct: float) -> list[Node]:
    route = [root]
    while route[-1].children and not route[-1].path.complete:
        parent = route[-1]
        route.append(max(parent.children, key=lambda child: child.puct(parent.visits, c_puct)))
    return route


def _expand(leaf: Node, *, problem: str, generator: Generator, scorer: Scorer, compute: Compute,
            aggregation: str, options: StepOptions, width: int) -> None:
    """Give the leaf up to `width` scored children; refused (BudgetExhausted) if none fits."""
    width = compute.samples_that_fit(width, options.max_step_tokens)
    if width < 1:
        raise BudgetExhausted("no expansion fits in the tokens left")
    children: list[Node] = []
    for path in next_steps(problem=problem, paths=[leaf.path], n=width, generator=generator, compute=compute,
                           options=options)[0]:
        try:
            path = scored(path, problem=problem, scorer=scorer, compute=compute)
        except BudgetExhausted:
            if not children:
                raise
            break
        children.append(Node(path, value=path.value(aggregation) if path.scores else leaf.value))
    for child in children:
        child.prior = 1.0 / len(children)
    leaf.children = children
