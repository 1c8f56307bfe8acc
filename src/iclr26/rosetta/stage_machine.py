"""Long-horizon stage machine: generated per-stage functions assembled into ``skill_reward`` / ``evaluate``.

Official code: ``rosetta/prompts/utils/extract_from_content.py`` (``build_actprim_funcs``,
``extract_target_actions``). For every stage N the LLM writes

    compute_target_position_stageN(prev_info, cur_info) -> (target_pos_1, target_pos_2)
    compute_target_pos_reward_stageN(pos_1, pos_2, target_1, target_2) -> r_N in [-1, 0]
    stageN_success(info) -> bool

and the plan's stage templates give the target primitive of each stage ("pick up" -> 0, "place" -> 1,
"push" -> 2). The assembled reward for the current stage c (vectorised over envs; action =
[primitive scores (3) | p1 (3) | p2 (3)], selected primitive = argmax of the scores):

    afford  = (1 + r_c) · 5   if selected == target_c else 0        (``afford="scaled"``, the default: the
              official form since commit 41ac0ae, 2025-03-02, and at the release head 365a82a)
    afford  = r_c · (5 if c is last else 1)  if selected == target_c else −1   (``afford="penalised"``:
              the official form at commit d383376, 2025-02-25, replaced by the one above)
    success = 10 · 1[stage_c_success(cur_info)]
    reward  = afford + success   (of the stage c the step started in)
    advance (``cascade=True``, the default, official): for N = 0..K-1 in order, c ← N + 1 if c == N and
              stage N succeeded, so one step can complete several stages (the official sequential ``if``s
              on ``self.cur_stage``); ``cascade=False``: at most one stage per step (c ← c + 1)
    evaluate: info["stageN_success"] for every N; info["success"] = (c == last) ∧ stage_last_success

The assembled functions are generated code like the rest: run them only in the sandbox.
"""

from __future__ import annotations

import re

__all__ = ["AFFORD_FORMS", "PRIMITIVE_IDS", "build_stage_machine", "extract_target_actions"]

PRIMITIVE_IDS = {"pick up": 0, "place": 1, "push": 2}


def extract_target_actions(plan: str) -> list[int]:
    """Target primitive per stage from plan lines ``Stage N: ...`` followed by ``- Stage template: "<prim>"``."""
    blocks = re.findall(r"(?m)^#* *Stage \d+:.*\n- Stage template: \"(.*?)\"", plan)
    out = []
    for name in blocks:
        if name not in PRIMITIVE_IDS:
            raise ValueError(f"unknown stage template {name!r}; expected one of {sorted(PRIMITIVE_IDS)}")
        out.append(PRIMITIVE_IDS[name])
    return out


def _stages(funcs: dict[str, str]) -> list[int]:
    idx = sorted({int(m.group(1)) for n in funcs if (m := re.match(r"(?:compute_target_\w+_stage|stage)(\d+)", n))})
    if idx != list(range(len(idx))) or not idx:
        raise ValueError(f"stage indices must be 0..K-1 and consecutive, got {idx}")
    for k in idx:
        for name in (f"compute_target_position_stage{k}", f"compute_target_pos_reward_stage{k}", f"stage{k}_success"):
            if name not in funcs:
                raise ValueError(f"missing generated function {name}")
    return idx


AFFORD_FORMS = ("scaled", "penalised")


def build_stage_machine(
    funcs: dict[str, str], target_actions: list[int], afford: str = "scaled", cascade: bool = True
) -> dict[str, str]:
    """The generated stage functions plus the assembled ``skill_reward`` and ``evaluate`` (sources).

    afford: "scaled" (official since 41ac0ae) or "penalised" (official at d383376); see the module docstring.
    cascade: several stages may complete in one step (official) or at most one.
    """
    if afford not in AFFORD_FORMS:
        raise ValueError(
            f"afford must be one of {AFFORD_FORMS} (renamed: 'paper' is now 'scaled', 'official' is now "
            f"'penalised'), got {afford!r}"
        )
    stages = _stages(funcs)
    if len(target_actions) != len(stages):
        raise ValueError(f"{len(stages)} stages but {len(target_actions)} target actions")
    last = stages[-1]
    body = [
        "def skill_reward(prev_info, cur_info, action, cur_stage):",
        "    action = np.asarray(action, dtype=float)",
        "    selected = np.argmax(action[:, :3], axis=1)",
        "    pos1, pos2 = action[:, 3:6], action[:, 6:9]",
        "    reward = np.zeros(action.shape[0])",
        "    new_stage = np.array(cur_stage, dtype=int)",
    ]
    for k, target in zip(stages, target_actions, strict=True):
        if afford == "scaled":
            aff = f"np.where(selected == {target}, (1.0 + r{k}) * 5.0, 0.0)"
        else:
            aff = f"np.where(selected == {target}, r{k} * {5.0 if k == last else 1.0}, -1.0)"
        body += [
            f"    t{k}a, t{k}b = compute_target_position_stage{k}(prev_info, cur_info)",
            f"    r{k} = np.asarray(compute_target_pos_reward_stage{k}(pos1, pos2, t{k}a, t{k}b), dtype=float)",
            f"    ok{k} = np.asarray(stage{k}_success(cur_info), dtype=bool)",
            f"    here{k} = np.asarray(cur_stage) == {k}",
            f"    reward = np.where(here{k}, {aff} + 10.0 * ok{k}, reward)",
        ]
    for k in stages:  # in stage order, so that with cascade a stage reached this step can complete too
        at = f"(new_stage == {k})" if cascade else f"here{k}"
        body.append(f"    new_stage = np.where({at} & ok{k}, {k + 1}, new_stage)")
    body.append("    return reward, new_stage")
    ev = ["def evaluate(info, cur_stage):", "    out = dict(info)"]
    ev += [f"    out['stage{k}_success'] = np.asarray(stage{k}_success(info), dtype=bool)" for k in stages]
    ev += [f"    out['success'] = (np.asarray(cur_stage) == {last}) & out['stage{last}_success']", "    return out"]
    keep = {n: s for n, s in funcs.items() if n not in ("skill_reward", "evaluate")}
    return {**keep, "skill_reward": "\n".join(body), "evaluate": "\n".join(ev)}
