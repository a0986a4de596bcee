"""Drills: recorded and live incidents to practise on, their ids and evidence, and grading the
trainee's answer.

Imports ``runner`` only, never ``cli``.
"""
