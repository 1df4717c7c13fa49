"""Helpers used by several stages: the error base, progress lines, static-graph helpers, the outputs declaration.

A module belongs here only when two or more stage packages import it; its digest is part of the
code version of every stage that does.
"""
