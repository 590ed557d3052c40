# aclgate — the two commands a newcomer needs are `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
# Re-install whenever the dependency list changes.
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test test-faults lint format bench bench-acl bench-authz bench-idle bench-loop-stall bench-throughput bench-stream soak kafka-jars spark-jars kafka-up kafka-down clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 16

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PIP) install -e '.[demo]'
	@touch $@

$(TEST_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PIP) install -e '.[demo,test,pipeline,dev]'
	@touch $@

run: $(DEMO_STAMP)  ## start an embedded broker with aclgate in front of it (Ctrl-C stops both)
	$(VENV)/bin/aclgate demo

# The suites that fetch and build other projects' code (franz-go's, helm, a Debian root file
# system) run in their own targets, which .ci/run runs after `make test`: `make test-outside`,
# `make test-deploy`. They keep `make test` within its 20 minutes on a fresh machine.
TEST_ELSEWHERE := --ignore=tests/outside --ignore=tests/deploy

# Two pytest-xdist workers, a test file each at a time (a file's module fixtures stay in one
# process; the Spark files together), heaviest first (tests/schedule.py); TEST_WORKERS=0 runs
# in one process.
TEST_WORKERS ?= 2

test: $(TEST_STAMP) kafka-jars valgrind  ## install everything and run the whole test suite (but the long fault runs)
	$(VENV)/bin/pytest -m "not faults" $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(TEST_ELSEWHERE) $(PYTEST_ARGS)

test-faults: $(TEST_STAMP) kafka-jars  ## every fault run (3-node Kafka, ~5 min); writes bench/results/faults.md
	FAULTS_RESULTS=bench/results/faults.md $(VENV)/bin/pytest tests/faults $(PYTEST_ARGS)

# The Kafka version matrix (docs/kafka.md): the transparency and equivalence tests against
# each other supported Kafka line; `make test` runs the pom's version (4.3.1) only.
KAFKA_MATRIX ?= 3.9.2
KAFKA_MATRIX_TESTS := tests/equivalence tests/proxy/test_clients.py tests/kafka/test_java_clients.py \
	tests/kafka/test_share_streams.py tests/kafka/test_clusters.py tests/kafka/test_tools.py \
	tests/kafka/test_authz.py tests/enforce/test_fetch_sessions_kafka.py tests/listeners/test_sasl_edges_kafka.py

.PHONY: test-kafka-matrix
test-kafka-matrix: $(TEST_STAMP)  ## transparency + equivalence tests against KAFKA_MATRIX (3.9.2; jars in tests/kafka/lib-<v>)
	@failed=""; for v in $(KAFKA_MATRIX); do \
	  $(MAKE) -s -C tests/kafka jars KAFKA_VERSION=$$v || exit 1; \
	  echo "== Apache Kafka $$v"; \
	  KAFKA_VERSION=$$v $(VENV)/bin/pytest -m kafka $(KAFKA_MATRIX_TESTS) $(PYTEST_ARGS) || failed="$$failed $$v"; \
	done; \
	if [ -n "$$failed" ]; then echo "Kafka versions with failures:$$failed" >&2; exit 1; fi

# franz-go's own kgo suite (fetched and built into .cache/outside/ by tests/outside/franz_go.py;
# needs Go 1.26+), directly against Kafka and through aclgate, compared test by test
# (docs/kafka.md, "An outside client's own suite"); `make test` runs it too.
.PHONY: test-outside
test-outside: $(TEST_STAMP) kafka-jars  ## franz-go's own integration suite: directly vs through aclgate (~2 min)
	$(VENV)/bin/pytest tests/outside -rA $(PYTEST_ARGS)

.PHONY: fuzz
fuzz: $(TEST_STAMP)  ## long TCP-level fuzz run: FUZZ_CASES (200000), FUZZ_SEED (fresh), FUZZ_CASE (docs/fuzzing.md)
	FUZZ_CASES=$(or $(FUZZ_CASES),200000) FUZZ_SEED=$(or $(FUZZ_SEED),$(shell date +%s)) \
		$(VENV)/bin/pytest tests/fuzz/test_tcp_fuzz.py -s $(PYTEST_ARGS)

lint: $(TEST_STAMP)  ## ruff format check + lint, mypy (the packages [tool.mypy] lists)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

format: $(TEST_STAMP)  ## ruff format + autofix
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(TEST_STAMP)  ## latency: direct vs bare relay vs aclgate (writes bench/results/)
	$(PIP) install -e '.[bench]'
	$(PY) -m bench.latency $(BENCH_ARGS)

bench-authz: $(TEST_STAMP)  ## authorizer µs/call and load time (writes bench/results/)
	$(PY) -m bench.authz

bench-acl: $(TEST_STAMP) kafka-jars  ## kafka ACL store: change on one proxy -> enforced by another (p50/p99), 500,000-ACL replay (writes bench/results/)
	$(PY) -m bench.acl_propagation $(BENCH_ARGS)

bench-loop-stall: $(TEST_STAMP)  ## worst stall each hostile input of issue 20 causes another client (writes bench/results/)
	$(PY) -m bench.loop_stall $(BENCH_ARGS)

bench-idle: $(TEST_STAMP)  ## proxy RSS per idle client connection, 10,000 connections (writes bench/results/)
	$(PY) -m bench.idle_connections $(BENCH_ARGS)

bench-throughput: $(TEST_STAMP) kafka-jars  ## Kafka's ProducerPerformance/ConsumerPerformance: direct vs aclgate (writes bench/results/)
	$(PIP) install -e '.[bench]'
	$(PY) -m bench.throughput $(BENCH_ARGS)

bench-stream: $(TEST_STAMP) kafka-jars  ## aclgate stream at 50,000 audit events/s (rate, end-to-end delay) and report from its Parquet (writes bench/results/)
	$(PY) -m bench.stream $(BENCH_ARGS)

soak: $(TEST_STAMP) kafka-jars  ## 30 min of traffic, ACL changes and cert reloads through aclgate (SOAK_ARGS="--minutes 3")
	$(PIP) install -e '.[bench]'
	$(PY) -m bench.soak $(SOAK_ARGS)

# Instructions per request under valgrind's callgrind (bench/instructions.py): the guard
# tests/bench/test_instruction_guard.py compares them with bench/results/instructions.json.
.PHONY: valgrind bench-instructions bench-instructions-baseline
valgrind:  ## install valgrind when missing (apt-get; the instruction-count guard needs it)
	@command -v valgrind >/dev/null || { $$(command -v sudo) apt-get update -qq && $$(command -v sudo) apt-get install -y -qq valgrind; }

bench-instructions: $(TEST_STAMP) valgrind  ## instructions per request (sans-IO and aclgate serve, callgrind; ~2 min), printed
	$(PY) -m bench.instructions --serve --compiled $(BENCH_ARGS)

bench-instructions-baseline: $(TEST_STAMP) valgrind  ## re-record bench/results/instructions.json, the guard's baseline (say why in the commit)
	$(PY) -m bench.instructions --serve --compiled --syscalls --runs 3 --out bench/results $(BENCH_ARGS)

# The compiled hot path (aclgate/native.py; docs/design.md, "The compiled hot path"): mypyc
# compiles the hot modules to C extensions; needs a C compiler and Python's headers.
.PHONY: wheel-compiled
# Built from a copy of what the wheel is made of: an in-tree build leaves build/lib behind,
# whose leftovers (a module since deleted) would be packaged.
WHEEL_SRC := .cache/wheel-src
wheel-compiled: $(TEST_STAMP)  ## build dist/aclgate-*.whl with the hot path compiled by mypyc (~1 min)
	rm -rf $(WHEEL_SRC) && mkdir -p $(WHEEL_SRC)
	git ls-files -co --exclude-standard | grep -E '^(aclgate|protocol|authz|proxy|certs|pipeline)/|^(setup.py|pyproject.toml|README.md|LICENSE)$$' \
	  | tar cf - -T - | tar xf - -C $(WHEEL_SRC)
	ACLGATE_MYPYC=1 $(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist $(WHEEL_SRC)
	@ls -1 dist/aclgate-*.whl

# Packaged artefacts (docs/deploy.md): the systemd unit, the OCI image, the Helm chart and the
# alert rules, each checked by tests/deploy/ in `make test`, which install their tools too.
.PHONY: deploy-tools oci-image test-deploy
deploy-tools: $(TEST_STAMP)  ## install systemd-analyze, promtool, debootstrap, podman, runc (apt-get) and helm (Go module, .cache/deploy/bin)
	$(PY) -m tests.deploy.tools

oci-image: $(TEST_STAMP)  ## build the OCI image into build/oci and build/aclgate-docker.tar (root; docs/deploy.md)
	@command -v debootstrap >/dev/null || $(PY) -m tests.deploy.tools
	$(PY) deploy/oci/build.py --out build/oci --docker-archive build/aclgate-docker.tar $(OCI_ARGS)

test-deploy: $(TEST_STAMP) kafka-jars  ## the tests of deploy/ only, the production example served in the image against Kafka included (~90 s with caches)
	$(VENV)/bin/pytest tests/deploy $(PYTEST_ARGS)

kafka-jars: spark-jars  ## fetch Apache Kafka from Maven Central into tests/kafka/lib (cached)
	@if [ -f tests/kafka/pom.xml ]; then $(MAKE) -s -C tests/kafka jars; fi

spark-jars:  ## fetch Spark's Kafka connector from Maven Central into pipeline/jars/lib (cached; aclgate stream needs it)
	@$(MAKE) -s -C pipeline/jars jars

kafka-up: $(TEST_STAMP) kafka-jars  ## start a local Apache Kafka for manual use (NODES=1|3, LISTENERS=PLAINTEXT,SASL_PLAINTEXT,SSL,SASL_SSL)
	$(PY) -m tests.kafka.local up --nodes $(or $(NODES),1) $(if $(LISTENERS),--listeners $(LISTENERS))

kafka-down:  ## stop the local Apache Kafka started by kafka-up
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m tests.kafka.local down

clean:  ## remove the venv and caches
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache tests/kafka/lib pipeline/jars/lib
