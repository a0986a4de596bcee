"""Local metric engines loaded with an incident bundle: `perfkit lab up/down`, and the test fixtures."""
