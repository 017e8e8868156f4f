"""How agents form groups (``task.agent_groups``), checked the same way for every task family.

A group's agents share one set of networks and one loss. Every family takes ``null`` (its own default), one of
:data:`GROUPINGS`, or a mapping of group name to agent names that puts each agent in exactly one group.
:func:`check_grouping` refuses a value of the wrong shape when the task is built, before any simulator runs;
:func:`group_agents` turns it into ``{group: [agents]}`` once the agents' names are known, refusing a mapping that
misses, repeats or invents an agent — naming ``task.agent_groups``, never the simulator's arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lit_marl.errors import ConfigError

#: the groupings every task family names the same way (torchrl's ``MarlGroupMapType`` names, lower case)
GROUPINGS = ("all_in_one_group", "one_group_per_agent")


def _allowed(members: str, agents: Sequence[str] | None = None) -> str:
    names = f" ({', '.join(agents)})" if agents is not None else ""
    return (f"allowed: null, {', '.join(map(repr, GROUPINGS))} or a mapping of group name to {members} names{names}, "
            f"each {members} in one group")


def check_grouping(agent_groups: Any, members: str = "agent") -> Any:
    """``agent_groups`` itself, or a ConfigError if it cannot be a grouping whatever the agents are called."""
    if agent_groups is None or agent_groups in GROUPINGS:
        return agent_groups
    if isinstance(agent_groups, str) or not isinstance(agent_groups, dict):
        raise ConfigError(f"task.agent_groups: unknown grouping {agent_groups!r}; {_allowed(members)}")
    for group, names in agent_groups.items():
        if not isinstance(group, str) or not group:
            raise ConfigError(f"task.agent_groups: group name {group!r} is not a non-empty string; {_allowed(members)}")
        if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"task.agent_groups: group {group!r} holds {names!r}, not a non-empty list of {members} "
                              f"names; {_allowed(members)}")
    return agent_groups


def group_agents(agent_groups: Any, agents: Sequence[str], members: str = "agent") -> dict[str, list[str]]:
    """``{group: [agent names]}``: ``None`` or ``"all_in_one_group"`` put ``agents`` in group ``agents``,
    ``"one_group_per_agent"`` gives each its own group, a mapping must name every agent exactly once."""
    check_grouping(agent_groups, members)
    agents = [str(a) for a in agents]
    if agent_groups is None or agent_groups == "all_in_one_group":
        return {"agents": agents}
    if agent_groups == "one_group_per_agent":
        return {agent: [agent] for agent in agents}
    named = [a for names in agent_groups.values() for a in names]
    unknown = sorted(set(named) - set(agents))
    missing = [a for a in agents if a not in named]
    twice = sorted({a for a in named if named.count(a) > 1})
    if unknown or missing or twice:
        problems = [f"{what} {', '.join(names)}" for what, names in
                    (("unknown", unknown), ("in no group", missing), ("in more than one group", twice)) if names]
        raise ConfigError(f"task.agent_groups: {agent_groups!r} does not put each {members} in exactly one group "
                          f"({'; '.join(problems)}); {_allowed(members, agents)}")
    return {g: list(names) for g, names in agent_groups.items()}
