# make services: start what the tests need and print its variables (see .ci/services).
# make test:     gofmt, the release's dry run, then for each module on its own
#                (GOWORK=off): go mod tidy, go vet, staticcheck and the
#                race-enabled tests against the real services; last, brief fuzz runs.
# make release VERSION=v0.1.0: tags every module in lockstep (.ci/release).
# make bench:    every benchmark six times into .bench/new.txt, compared by
#                benchstat with the previous run, then the middleware's
#                targets (.ci/bench-middleware), the waiting duplicates'
#                (.ci/bench-wait), the stores' side-by-side
#                comparisons with redis-benchmark, pgbench and database/sql,
#                and the ratios to the Go peers (.ci/bench-peers, when
#                PEERBENCH and PEERBENCH_PEERS name the harness and peers).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

# The servers the tests use. One given on the command line
# (make test DATABASE_URL=...) is used as given; .ci/services provides the
# rest and prints their variables, which WITH_SERVICES sets for a command.
# The environment's values are not used.
SERVICE_VARS := REDIS_URL REDIS_CLUSTER_ADDRS REDIS_SENTINEL DATABASE_URL MYSQL_DSN
unexport $(foreach v,$(SERVICE_VARS),$(if $(filter command line,$(origin $(v))),,$(v)))
WITH_SERVICES := services=$$(.ci/services) && eval "$$services" &&

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT := golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
# Fuzzing is bounded by executions, not time: with a duration, Go 1.26's fuzz
# coordinator can fail a clean run with "context deadline exceeded" when the
# deadline fires while a worker is busy (go.dev/issue/75804). These counts
# take about ten seconds each here.
FUZZ_KEYS := 100000x
FUZZ_RECORDER := 4000x
FUZZ_CANONICAL := 100000x
FUZZ_JSON_KEY := 100000x

# The modules, each a folder with its go.mod; "." is the root module.
MODULES := . store_redis store_postgres store_mysql store_sqlite otelidempotency grpcidempotency example cmd/idempotency

.PHONY: services test bench release $(addprefix check/,$(MODULES))

services:
	.ci/services

test:
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l lists:"; echo "$$unformatted"; exit 1; fi
	.ci/release v0.0.0-dry.run --dry-run
	$(WITH_SERVICES) $(MAKE) --no-print-directory --output-sync=target -j3 \
		$(foreach v,$(SERVICE_VARS),$(v)="$$$(v)") $(addprefix check/,$(MODULES))
	go test -run='^$$' -fuzz='^FuzzParseKey$$' -fuzztime=$(FUZZ_KEYS) ./httpx
	go test -run='^$$' -fuzz='^FuzzRecorder$$' -fuzztime=$(FUZZ_RECORDER) ./httpx
	go test -run='^$$' -fuzz='^FuzzCanonicalJSON$$' -fuzztime=$(FUZZ_CANONICAL) ./internal/canonjson
	go test -run='^$$' -fuzz='^FuzzKeyFromJSONField$$' -fuzztime=$(FUZZ_JSON_KEY) .

# check/DIR: the module in DIR on its own, without the workspace.
$(addprefix check/,$(MODULES)): check/%:
	cd $* && GOWORK=off go mod tidy -diff
	cd $* && GOWORK=off go vet ./...
	cd $* && GOWORK=off go run $(STATICCHECK) ./...
	cd $* && GOWORK=off go test -race -count=1 -timeout=30m ./...

release:
	.ci/release $(VERSION)

bench:
	mkdir -p .bench
	if [ -f .bench/new.txt ]; then mv .bench/new.txt .bench/old.txt; fi
	$(WITH_SERVICES) for m in $(MODULES); do (cd $$m && go test -run='^$$' -bench=. -benchmem -count=6 ./...); done | tee .bench/new.txt
	if [ -f .bench/old.txt ]; then \
		go run $(BENCHSTAT) .bench/old.txt .bench/new.txt; \
	else \
		go run $(BENCHSTAT) .bench/new.txt; \
	fi
	$(WITH_SERVICES) for script in .ci/bench-middleware .ci/bench-wait .ci/bench-redis .ci/bench-postgres .ci/bench-mysql .ci/bench-sqlite .ci/bench-peers; do \
		if [ -x "$$script" ]; then "$$script"; fi; \
	done
