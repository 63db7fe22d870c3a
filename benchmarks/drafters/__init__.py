"""Drafting on the workloads it serves: repeats, the user's files, structured output, tool calls,
speculation across machines."""
