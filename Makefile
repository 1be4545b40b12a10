# Thin aliases for the scripts CI and developers run (see README.md).
.PHONY: setup test demo ref050 compat

setup:
	bash scripts/setup.sh

test:
	bash scripts/test.sh

demo:
	bash scripts/demo.sh

ref050:
	bash scripts/ref050-venv.sh

compat: setup ref050
	.venv/bin/python -m pytest tests/compat -ra -q
