r"""The Plan-Path grid environment and its two-agent (tool + planner) and single-agent workflows.

Plan-Path (the official code's ``stateful/env_state.py``): an ``h x w`` grid with a fraction 0.22 of wall
cells and a random reachable start and goal, both drawn from the environment's seed. The agent moves
``U/D/L/R``. Per move, with :math:`\Phi(s) = -\mathrm{Manhattan}(s, goal)`:

.. math::

    r = \begin{cases} r_{step} = -0.01 & \text{valid move} \\
                      r_{invalid} = -0.10 & \text{out of bounds or into a wall (the agent stays)} \end{cases}
        \;+\; \lambda\,(\gamma\,\Phi(s') - \Phi(s))
        \;+\; \mathbb{1}[s' = goal]\,(1.0 + 0.5\,\mathbb{1}[n_{steps} = d^*])

with :math:`\gamma = 0.99`, :math:`\lambda = 1` and :math:`d^*` the shortest-path length; reaching
``max_steps`` moves adds ``r_fail = -1``. A turn's reward is the sum over its move list, which stops at
the goal. A plan action that is empty or malformed gets ``-2`` and does not move the agent.

Tiny workflow of the CPU reproduction. One token vocabulary shared by both roles, so
that swapping the role policies is syntactically valid:

* moves ``U D L R``, ``EOS``;
* the tool DSL: algorithms ``BFS GREEDY WALLFOLLOW RANDOM``, horizons ``H1 H2 H3`` and digits ``0..7``.

The **tool agent** (the code writer of the paper) emits a 4-token program ``ALG row col H``; it is
*executed* on a copy of the state (this mirrors running the tool's code in a sandbox) and prints an action
list of at most ``H`` moves towards target ``(row, col)``. Its local reward is the environment reward of
that list applied to a copy of the state; ``-2`` if no list could be parsed (malformed program), ``-1``
if the program fails at run time (target outside the grid). Both agents see the static grid, the start and the
goal (as the official Plan-Path prompt; ``show_position=True`` adds the current cell). The **plan agent**
also sees the tool's action list and the turn, and emits at most ``L = 3`` moves then ``EOS``; they are executed on the
real state. The **single agent** is the plan agent without a tool.

Everything is vectorised over ``n`` parallel *branches* (numpy arrays); :meth:`PlanPathBatch.select`
copies branch states, which is how tree-structured sampling broadcasts the best branch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

# ---------------------------------------------------------------------------------------------------
# vocabulary
# ---------------------------------------------------------------------------------------------------

MOVES = ("U", "D", "L", "R")
ALGS = ("BFS", "GREEDY", "WALLFOLLOW", "RANDOM")
VOCAB: tuple[str, ...] = (*MOVES, "EOS", *ALGS, "H1", "H2", "H3", *(str(d) for d in range(8)))
TOK = {t: i for i, t in enumerate(VOCAB)}
EOS = TOK["EOS"]
MOVE_IDS = tuple(range(4))
ALG_IDS = tuple(TOK[a] for a in ALGS)
H_IDS = (TOK["H1"], TOK["H2"], TOK["H3"])
DIGIT_IDS = tuple(TOK[str(d)] for d in range(8))
RESPONSE_LEN = 4  # tool program: 4 tokens; plan: <= 3 moves + EOS
MAX_MOVES = 3  # L
ROLES = ("tool", "plan")
DELTAS = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])  # U D L R as (drow, dcol)
_CLOCKWISE = np.array([3, 2, 0, 1])  # U -> R, D -> L, L -> U, R -> D


@dataclass(frozen=True)
class PlanPathConfig:
    """Plan-Path environment with the official code's reward constants (``stateful/env_state.py``).

    size: h = w, the grid side (paper 10; CPU reproduction 6, smoke 5); at most 8 (digit tokens 0..7).
    block_ratio: Fraction of wall cells (rounded to an integer count).
    r_step: Reward of a valid move.
    r_invalid: Reward of a move out of bounds or into a wall (the agent stays).
    gamma: gamma of the potential shaping lambda (gamma Phi(s') - Phi(s)).
    shaping_lambda: lambda of the potential shaping.
    r_goal: Reward for reaching the goal.
    r_optimal_bonus: Extra reward when the goal is reached in exactly the shortest-path number of moves.
    r_fail: Reward added when the move count reaches max_steps.
    max_steps: Move budget of an episode (the code's 10,000; the turn budget binds first).
    r_bad_action: Plan agent: empty or malformed action list. Tool agent: no list could be parsed.
    r_tool_error: Tool agent: the program failed at run time (the code's "code missing" penalty).
    train_seed_offset: Seed of training environment i is train_seed_offset + i.
    test_seed_offset: seed of test environment i is test_seed_offset + i (disjoint from training).
    constrained_decoding: mask each response position to the role's grammar (the format prior an LLM brings).
    show_position: add the current cell to observations (off: the official prompt shows the static grid, start, goal).
    """

    size: int = 6
    block_ratio: float = 0.22
    r_step: float = -0.01
    r_invalid: float = -0.10
    gamma: float = 0.99
    shaping_lambda: float = 1.0
    r_goal: float = 1.0
    r_optimal_bonus: float = 0.5
    r_fail: float = -1.0
    max_steps: int = 10_000
    r_bad_action: float = -2.0
    r_tool_error: float = -1.0
    train_seed_offset: int = 0
    test_seed_offset: int = 10_000_000
    constrained_decoding: bool = True
    show_position: bool = False

    def __post_init__(self) -> None:
        if not 3 <= self.size <= 8:
            raise ValueError(f"size must be in 3..8 (digit tokens 0..7), got {self.size}")
        if not 0.0 <= self.block_ratio < 0.6:
            raise ValueError(f"block_ratio must be in [0, 0.6), got {self.block_ratio}")
        if self.test_seed_offset - self.train_seed_offset < 10**6:
            raise ValueError("train and test seed ranges must be >= 10**6 apart (disjoint)")


# ---------------------------------------------------------------------------------------------------
# grid generation (seeded) with all-pairs BFS tables
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """One Plan-Path instance: walls [S, S] bool, start / goal cell indices, BFS tables."""

    walls: np.ndarray
    start: int
    goal: int
    dist: np.ndarray  # [cells, cells] BFS distance (large = unreachable), dist[target, cell]
    next_move: np.ndarray  # [cells, cells] first BFS move from cell towards target (-1 none)

    @property
    def shortest(self) -> int:
        return int(self.dist[self.goal, self.start])


@lru_cache(maxsize=16)
def _neighbours(size: int) -> np.ndarray:
    """[cells, 4] neighbour cell of each cell for U D L R, -1 if off the grid."""
    rr, cc = np.divmod(np.arange(size * size), size)
    nb = np.full((size * size, 4), -1)
    for m, (dr, dc) in enumerate(DELTAS):
        r2, c2 = rr + dr, cc + dc
        ok = (r2 >= 0) & (r2 < size) & (c2 >= 0) & (c2 < size)
        nb[ok, m] = r2[ok] * size + c2[ok]
    return nb


def _bfs_tables(walls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All-pairs shortest-path lengths on free cells and the first move of a shortest path (ties: U, D, L, R).

    Distances come from :func:`scipy.sparse.csgraph.shortest_path` (unweighted BFS) on the 4-neighbour
    graph of free cells; unreachable pairs (and wall cells) get a large sentinel.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    size = walls.shape[0]
    cells = size * size
    free = ~walls.reshape(-1)
    nb = _neighbours(size)
    big = 10**6
    src, dst = [], []
    for m in range(4):
        ok = (nb[:, m] >= 0) & free
        ok[ok] &= free[nb[ok, m]]
        src.append(np.flatnonzero(ok))
        dst.append(nb[ok, m])
    s, d = np.concatenate(src), np.concatenate(dst)
    adj = csr_matrix((np.ones(len(s)), (s, d)), shape=(cells, cells))
    sp = shortest_path(adj, method="D", directed=True, unweighted=True)  # sp[a, b]: moves from a to b
    sp[~free, :] = np.inf
    sp[:, ~free] = np.inf
    # dist[target, cell] (the graph is symmetric, so the transpose is the distance from cell to target)
    dist = np.where(np.isfinite(sp.T), sp.T, big).astype(np.int64)
    # next move from `cell` to `target`: first neighbour (U, D, L, R order) with distance one less
    nb_safe = np.where(nb >= 0, nb, 0)
    nb_dist = dist[:, nb_safe]  # [target, cell, 4]
    nb_dist = np.where((nb >= 0)[None] & free[nb_safe][None], nb_dist, big)
    good = nb_dist == (dist[:, :, None] - 1)
    good &= (dist[:, :, None] < big) & (dist[:, :, None] > 0)
    next_move = np.where(good.any(-1), good.argmax(-1), -1)
    return dist, next_move


@lru_cache(maxsize=50_000)
def make_grid(seed: int, size: int = 6, block_ratio: float = 0.22) -> Grid:
    """The Plan-Path instance of ``seed``: walls, a reachable start != goal (retries inside the seed's RNG)."""
    rng = np.random.default_rng(seed)
    cells = size * size
    n_walls = int(round(block_ratio * cells))
    while True:
        walls = np.zeros(cells, dtype=bool)
        walls[rng.choice(cells, size=n_walls, replace=False)] = True
        free = np.flatnonzero(~walls)
        start, goal = rng.choice(free, size=2, replace=False)
        walls2 = walls.reshape(size, size)
        dist, next_move = _bfs_tables(walls2)
        if dist[goal, start] < 10**6:
            return Grid(walls2, int(start), int(goal), dist, next_move)


def grid_from_layout(rows: Sequence[str]) -> Grid:
    """A hand-made grid from strings: ``#`` wall, ``A`` start, ``G`` goal, ``.`` free (tests, examples)."""
    size = len(rows)
    if any(len(r) != size for r in rows):
        raise ValueError("layout must be square")
    flat = "".join(rows)
    if flat.count("A") != 1 or flat.count("G") != 1:
        raise ValueError("layout needs exactly one A (start) and one G (goal)")
    walls = np.array([ch == "#" for ch in flat]).reshape(size, size)
    dist, next_move = _bfs_tables(walls)
    return Grid(walls, flat.index("A"), flat.index("G"), dist, next_move)


def env_seeds(cfg: PlanPathConfig, split: str, indices: Sequence[int]) -> list[int]:
    """Seeds of the train / test environments with these indices (disjoint ranges)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    off = cfg.train_seed_offset if split == "train" else cfg.test_seed_offset
    return [off + int(i) for i in indices]


# ---------------------------------------------------------------------------------------------------
# grammar (format prior) and parsing of text responses (Hugging Face agents)
# ---------------------------------------------------------------------------------------------------


def grammar_mask(role: str, constrained: bool = True) -> torch.Tensor:
    """[RESPONSE_LEN, V] bool: tokens allowed at each response position for ``role``."""
    V = len(VOCAB)
    if not constrained:
        return torch.ones(RESPONSE_LEN, V, dtype=torch.bool)
    m = torch.zeros(RESPONSE_LEN, V, dtype=torch.bool)
    if role == "tool":
        for pos, ids in enumerate((ALG_IDS, DIGIT_IDS, DIGIT_IDS, H_IDS)):
            m[pos, list(ids)] = True
    elif role == "plan":
        m[:MAX_MOVES, [*MOVE_IDS, EOS]] = True
        m[MAX_MOVES, EOS] = True
    else:
        raise ValueError(f"unknown role {role!r}; roles are {ROLES}")
    return m


_TOOL_RE = re.compile(r"(BFS|GREEDY|WALLFOLLOW|RANDOM)\s*\(?\s*(\d)\s*[, ]\s*(\d)\s*[, ]\s*(?:H)?(\d)")
_PLAN_RE = re.compile(r"####\s*\[?([UDLR ,'\"]*)\]?")


def parse_text_response(role: str, text: str) -> list[int]:
    """Token ids of a free-text response: tool ``"BFS 2 3 3"`` / ``"**Actions List**: ..."``, plan
    ``"... #### [U, R, R]"``. Unparseable text gives ``[]`` (the environment then assigns ``-2``)."""
    if role == "tool":
        m = _TOOL_RE.search(text)
        if not m or not 1 <= int(m.group(4)) <= 3:
            return []
        return [TOK[m.group(1)], TOK[m.group(2)], TOK[m.group(3)], H_IDS[int(m.group(4)) - 1]]
    m = _PLAN_RE.search(text)
    if not m:
        return []
    moves = [TOK[ch] for ch in m.group(1) if ch in "UDLR"]
    return moves[:MAX_MOVES] + [EOS]


# ---------------------------------------------------------------------------------------------------
# the vectorised environment batch
# ---------------------------------------------------------------------------------------------------


class PlanPathBatch:
    """``n`` Plan-Path branches (state arrays of length ``n``), stepped by agents of a workflow.

    Branch ``b`` plays grid ``grids[b]``. State per branch: position, move count, done / success, the
    reward of the last real transition (``team_reward``), and the tool's latest action list (what the
    plan agent reads). ``max_turns`` is the turn budget (used for the turn one-hot of observations).
    """

    def __init__(self, cfg: PlanPathConfig, seeds: Sequence[int | Grid], max_turns: int, rng_seed: int = 0):
        self.cfg = cfg
        self.max_turns = int(max_turns)
        self.grids = [s if isinstance(s, Grid) else make_grid(int(s), cfg.size, cfg.block_ratio) for s in seeds]
        if any(g.walls.shape != (cfg.size, cfg.size) for g in self.grids):
            raise ValueError(f"every grid must be {cfg.size}x{cfg.size}")
        n = len(self.grids)
        self.n = n
        S = cfg.size
        self.cells = S * S
        self.walls = np.stack([g.walls.reshape(-1) for g in self.grids]) if n else np.zeros((0, S * S), bool)
        self.goal = np.array([g.goal for g in self.grids], dtype=np.int64)
        self.start = np.array([g.start for g in self.grids], dtype=np.int64)
        self.shortest = np.array([g.shortest for g in self.grids], dtype=np.int64)
        self.next_move = (
            np.stack([g.next_move for g in self.grids]) if n else np.zeros((0, S * S, S * S), dtype=np.int64)
        )
        self.pos = np.array([g.start for g in self.grids], dtype=np.int64)
        self.steps = np.zeros(n, dtype=np.int64)
        self.is_done = np.zeros(n, dtype=bool)
        self.is_success = np.zeros(n, dtype=bool)
        self.last_reward = np.zeros(n, dtype=np.float64)
        self.tool_list = np.full((n, MAX_MOVES), -1, dtype=np.int64)
        self.rng = np.random.default_rng(rng_seed)
        self._nb = _neighbours(S)

    # ----- state copying (tree sampling) -----
    _STATE = ("pos", "steps", "is_done", "is_success", "last_reward", "tool_list")

    def select(self, index: np.ndarray) -> None:
        """Branch ``b`` becomes a deep copy of branch ``index[b]`` (grids must match)."""
        index = np.asarray(index, dtype=np.int64)
        gids = [id(self.grids[i]) for i in index]
        if gids != [id(g) for g in self.grids]:
            raise ValueError("select() may only copy branches that play the same grid")
        for name in self._STATE:
            setattr(self, name, getattr(self, name)[index].copy())

    def clone(self) -> PlanPathBatch:
        new = object.__new__(PlanPathBatch)
        new.__dict__.update(self.__dict__)
        for name in self._STATE:
            setattr(new, name, getattr(self, name).copy())
        new.grids = list(self.grids)
        new.rng = np.random.default_rng(self.rng.integers(2**63))
        return new

    def state_key(self) -> list[tuple]:
        """A hashable snapshot of each branch's state (tests: all branches equal after a selection)."""
        return [
            (
                int(self.pos[b]),
                int(self.steps[b]),
                bool(self.is_done[b]),
                round(float(self.last_reward[b]), 9),
                tuple(int(x) for x in self.tool_list[b]),
            )
            for b in range(self.n)
        ]

    def done(self) -> np.ndarray:
        return self.is_done.copy()

    def success(self) -> np.ndarray:
        return self.is_success.copy()

    def team_reward(self) -> np.ndarray:
        """Reward of the last real environment transition (the code's ``env.state.reward``)."""
        return self.last_reward.copy()

    # ----- observations -----
    def observe(self, agent: str, turn: int, kind: str = "features"):
        """Observation of ``agent`` (role ``tool`` / ``plan``) at ``turn``: a float tensor [n, obs_dim]
        (tiny policies) or a list of n prompt strings (``kind="text"``, LLM agents)."""
        if kind == "text":
            return [self._prompt(b, agent, turn) for b in range(self.n)]
        if kind != "features":
            raise ValueError(f"kind must be 'features' or 'text', got {kind!r}")
        n, C = self.n, self.cells
        # the official Plan-Path prompt: the static grid, start and goal (prompt.py, prompt_plan_path)
        start1 = np.zeros((n, C))
        start1[np.arange(n), self.start] = 1
        goal1 = np.zeros((n, C))
        goal1[np.arange(n), self.goal] = 1
        chans = [self.walls.astype(float), start1, goal1]
        if self.cfg.show_position:  # flag: the current cell as an extra channel
            pos1 = np.zeros((n, C))
            pos1[np.arange(n), self.pos] = 1
            chans.append(pos1)
        tl = np.zeros((n, MAX_MOVES, 5))
        if agent == "plan":  # the tool's latest list; slot value 4 = "no move"
            v = np.where(self.tool_list >= 0, self.tool_list, 4)
            tl[np.arange(n)[:, None], np.arange(MAX_MOVES)[None], v] = 1
        turn1 = np.zeros((n, self.max_turns))
        turn1[:, min(turn, self.max_turns - 1)] = 1
        role1 = np.zeros((n, len(ROLES)))
        role1[:, ROLES.index(agent)] = 1
        feats = np.concatenate([*chans, tl.reshape(n, -1), turn1, role1], 1)
        return torch.from_numpy(feats).float()

    @staticmethod
    def obs_dim(size: int, max_turns: int, show_position: bool = False) -> int:
        return (3 + int(show_position)) * size * size + MAX_MOVES * 5 + max_turns + len(ROLES)

    def _prompt(self, b: int, agent: str, turn: int) -> str:
        S = self.cfg.size
        grid = "\n".join("".join("#" if self.walls[b, r * S + c] else "." for c in range(S)) for r in range(S))
        # as the official prompt_plan_path: static grid, start and goal
        where = f"Start: {divmod(int(self.start[b]), S)}, Goal: {divmod(int(self.goal[b]), S)}"
        if self.cfg.show_position:
            where += f", Current: {divmod(int(self.pos[b]), S)}"
        head = f"Grid ('.' free, '#' blocked):\n{grid}\n{where}\nTurn {turn}. "
        if agent == "tool":
            return (
                "You are the tool agent. "
                + head
                + "Write a program 'ALG row col H' (ALG in BFS/GREEDY/WALLFOLLOW/RANDOM, H in 1..3).\nProgram:"
            )
        tool = "".join(MOVES[m] for m in self.tool_list[b] if m >= 0) or "none"
        return (
            "You are the plan agent. "
            + head
            + f"Tool agent's actions: {tool}. Give at most 3 moves after ####.\nAnswer:"
        )

    # ----- moves -----
    def _manhattan(self, cell: np.ndarray, target: np.ndarray) -> np.ndarray:
        S = self.cfg.size
        r1, c1 = np.divmod(cell, S)
        r2, c2 = np.divmod(target, S)
        return np.abs(r1 - r2) + np.abs(c1 - c2)

    def _apply_moves(self, moves: np.ndarray, pos: np.ndarray, steps: np.ndarray, done: np.ndarray, rows: np.ndarray):
        """Apply move lists ``moves[j, :]`` (-1 = none) to branches ``rows``. Returns new (pos, steps, done,
        success, reward) for those rows; the list stops at the goal."""
        cfg = self.cfg
        pos, steps, done = pos.copy(), steps.copy(), done.copy()
        success = np.zeros(len(rows), dtype=bool)
        reward = np.zeros(len(rows))
        goal = self.goal[rows]
        walls = self.walls[rows]
        for j in range(moves.shape[1]):
            m = moves[:, j]
            act = (m >= 0) & ~done
            if not act.any():
                continue
            nxt = self._nb[pos, np.clip(m, 0, 3)]
            ok = act & (nxt >= 0)
            ok[ok] &= ~walls[np.flatnonzero(ok), nxt[ok]]
            d0 = self._manhattan(pos, goal)
            new_pos = np.where(ok, nxt, pos)
            d1 = self._manhattan(new_pos, goal)
            shaping = cfg.shaping_lambda * (cfg.gamma * (-d1) - (-d0))
            r = np.where(ok, cfg.r_step, cfg.r_invalid) + shaping
            steps = steps + act
            arrived = act & (new_pos == goal)
            r = r + arrived * (cfg.r_goal + cfg.r_optimal_bonus * (steps == self.shortest[rows]))
            failed = act & ~arrived & (steps >= cfg.max_steps)
            r = r + failed * cfg.r_fail
            reward += np.where(act, r, 0.0)
            pos = np.where(act, new_pos, pos)
            success |= arrived
            done = done | arrived | failed
        return pos, steps, done, success, reward

    # ----- tool programs -----
    def run_program(self, alg: np.ndarray, target: np.ndarray, horizon: np.ndarray) -> np.ndarray:
        """Execute tool programs on copies of the current state: [n, MAX_MOVES] move ids (-1 = none).

        BFS: shortest path towards ``target`` (empty if the target is a wall or unreachable). GREEDY: the
        move that reduces the Manhattan distance to ``target``, rows first, ignoring walls. WALLFOLLOW: the
        greedy direction, turning clockwise until the next cell is free. RANDOM: a random free move.
        """
        n = self.n
        out = np.full((n, MAX_MOVES), -1, dtype=np.int64)
        pos = self.pos.copy()
        S = self.cfg.size
        for j in range(MAX_MOVES):
            live = (j < horizon) & (pos != target)
            if not live.any():
                break
            tr, tc = np.divmod(target, S)
            pr, pc = np.divmod(pos, S)
            greedy = np.where(tr < pr, 0, np.where(tr > pr, 1, np.where(tc < pc, 2, 3)))
            bfs = self.next_move[np.arange(n), target, pos]
            nbs = self._nb[pos]  # [n, 4]
            free = (nbs >= 0) & ~np.take_along_axis(self.walls, np.where(nbs >= 0, nbs, 0), 1)
            wf = greedy.copy()
            for _ in range(3):
                blocked = ~free[np.arange(n), wf]
                wf = np.where(blocked, _CLOCKWISE[wf], wf)
            scores = np.where(free, self.rng.random((n, 4)), -1.0)
            rnd_choice = scores.argmax(1)
            move = np.select([alg == 0, alg == 1, alg == 2], [bfs, greedy, wf], rnd_choice)
            live &= move >= 0
            out[live, j] = move[live]
            nxt = self._nb[pos, np.clip(move, 0, 3)]
            ok = live & (nxt >= 0)
            ok[ok] &= ~self.walls[np.flatnonzero(ok), nxt[ok]]
            pos = np.where(ok, nxt, pos)
        return out

    # ----- agent steps -----
    def step(self, agent: str, responses) -> np.ndarray:
        """Parse and execute the responses of ``agent`` on every branch; return its local reward [n].

        ``responses`` is a LongTensor / array [n, RESPONSE_LEN] of token ids (tiny policies) or a list of
        n strings (LLM agents, parsed with :func:`parse_text_response`). Done branches do not change and
        get reward 0.
        """
        toks = self._as_tokens(agent, responses)
        if agent == "tool":
            return self._step_tool(toks)
        if agent == "plan":
            return self._step_plan(toks)
        raise ValueError(f"unknown agent {agent!r}; Plan-Path agents are {ROLES}")

    def _as_tokens(self, agent: str, responses) -> np.ndarray:
        if isinstance(responses, torch.Tensor):
            toks = responses.detach().cpu().numpy()
        elif isinstance(responses, np.ndarray):
            toks = responses
        else:
            responses = list(responses)
            if len(responses) != self.n:
                raise ValueError(f"got {len(responses)} responses for {self.n} branches")
            toks = np.full((self.n, RESPONSE_LEN), -1, dtype=np.int64)
            for b, r in enumerate(responses):
                ids = parse_text_response(agent, r) if isinstance(r, str) else list(r)
                ids = ids[:RESPONSE_LEN]
                toks[b, : len(ids)] = ids
        toks = np.asarray(toks, dtype=np.int64)
        if toks.shape != (self.n, RESPONSE_LEN):
            raise ValueError(f"responses must be [{self.n}, {RESPONSE_LEN}] token ids, got {toks.shape}")
        return toks

    def _step_tool(self, toks: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        is_alg = np.isin(toks[:, 0], ALG_IDS)
        is_d1 = np.isin(toks[:, 1], DIGIT_IDS)
        is_d2 = np.isin(toks[:, 2], DIGIT_IDS)
        is_h = np.isin(toks[:, 3], H_IDS)
        parsed = is_alg & is_d1 & is_d2 & is_h
        alg = np.where(is_alg, toks[:, 0] - ALG_IDS[0], 0)
        row = np.where(is_d1, toks[:, 1] - DIGIT_IDS[0], 0)
        col = np.where(is_d2, toks[:, 2] - DIGIT_IDS[0], 0)
        horizon = np.where(is_h, toks[:, 3] - H_IDS[0] + 1, 0)
        S = cfg.size
        in_grid = (row < S) & (col < S)
        runs = parsed & in_grid
        target = np.where(runs, row * S + col, self.pos)
        moves = self.run_program(alg, target, np.where(runs, horizon, 0))
        rows = np.arange(self.n)
        _, _, _, _, r_copy = self._apply_moves(moves, self.pos, self.steps, self.is_done, rows)
        local = np.where(parsed, np.where(in_grid, r_copy, cfg.r_tool_error), cfg.r_bad_action)
        live = ~self.is_done
        self.tool_list = np.where(live[:, None], moves, self.tool_list)
        return np.where(live, local, 0.0)

    def _step_plan(self, toks: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        # valid: k >= 1 moves then EOS (or the list ends after MAX_MOVES moves); anything else is malformed
        is_move = np.isin(toks, MOVE_IDS)
        is_eos = toks == EOS
        first_non_move = np.where((~is_move).any(1), (~is_move).argmax(1), RESPONSE_LEN)
        k = np.minimum(first_non_move, MAX_MOVES)
        end_ok = (k == RESPONSE_LEN) | is_eos[np.arange(self.n), np.minimum(k, RESPONSE_LEN - 1)]
        valid = (k >= 1) & end_ok
        moves = np.where(is_move[:, :MAX_MOVES] & (np.arange(MAX_MOVES)[None] < k[:, None]), toks[:, :MAX_MOVES], -1)
        moves = np.where(valid[:, None], moves, -1)
        live = ~self.is_done
        rows = np.arange(self.n)
        pos, steps, done, succ, r = self._apply_moves(moves, self.pos, self.steps, self.is_done, rows)
        local = np.where(valid, r, cfg.r_bad_action)
        self.pos, self.steps = pos, steps
        self.is_done, self.is_success = done, self.is_success | succ
        self.last_reward = np.where(live, np.where(valid, r, 0.0), self.last_reward)
        return np.where(live, local, 0.0)
