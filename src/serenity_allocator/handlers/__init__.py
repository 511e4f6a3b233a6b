"""The Lambda entry points, wiring only: read the event and the settings, call the use cases.

Each handler reads its settings once, builds its adapters once per container, turns the Lambda
context into deadlines and hands the work to the use cases (the rules stay in
:mod:`serenity_allocator.domain`, the Allocator's use cases in
:mod:`serenity_allocator.application`); it returns what Powertools or the state machine
expects. No rule is decided here.
"""
