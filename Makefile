# Kiln's developer entry points. `make help` lists them.

CARGO            ?= cargo
CONTROLPLANE_DIR ?= .kiln/controlplane
KILN             := $(CARGO) run --quiet --locked --
N                ?= 100
TARGET_DIR       := $(or $(CARGO_TARGET_DIR),target)
BENCH_BIN_DIR    := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kiln/bench

.PHONY: help build run kiln-debug test fuzz bench bench-conversion bench-webhook bench-rules lint docs chart controlplane node cluster-up cluster-down deploy-manifests image clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## Build the kiln binary
	$(CARGO) build --locked

# What the demo's cluster needs built: nothing with $KUBECONFIG set (the demo
# builds the control plane itself should that cluster not answer), the
# control plane and, as root, its node otherwise.
DEMO_CLUSTER := $(if $(KUBECONFIG),,$(if $(filter 0,$(shell id -u)),node,controlplane))

run: ## The demo: example rules, CRDs and objects on $KUBECONFIG's cluster, or on a local control plane
	@echo "make run: building kiln (cargo) beside the local control plane (Go); first time only"
	@$(MAKE) --no-print-directory -j2 kiln-debug $(DEMO_CLUSTER)
	$(TARGET_DIR)/debug/kiln demo

kiln-debug:
	$(CARGO) build --locked --bin kiln

test: lint docs chart controlplane node ## Lints, the book, the chart, unit tests and integration tests against a real local control plane (and, as root, its node)
	$(CARGO) test --locked --no-fail-fast

docs: ## The book (docs/) with mdBook, into docs/book/ (mdBook installed from crates.io, cached)
	@mdbook="$$(bash tests/tools/mdbook.sh)" && "$$mdbook" build docs

chart: ## helm lint of charts/kiln (Helm built from its Go module, cached; the chart's tests use it too)
	@helm="$$(bash tests/tools/helm.sh)" && "$$helm" lint --strict charts/kiln

fuzz: ## Long property-based fuzzing of YAML, rule loading and templates (FUZZ_CASES, default 20000)
	PROPTEST_CASES=$${FUZZ_CASES:-20000} $(CARGO) test --locked --profile fuzz --test fuzz

CONTENDERS ?= kiln,kiln-sharded,kube-rs,controller-runtime,ceiling

bench: controlplane ## Benchmark kiln against kube-rs, controller-runtime and the API server's ceiling (N=100; make bench N=10000 CONTENDERS=kiln,kube-rs,controller-runtime)
	$(CARGO) build --locked --release --bin kiln --example bench --example bench-kube-rs
	cd tests/bench/controller-runtime && go build -mod=readonly -o "$(BENCH_BIN_DIR)/controller-runtime-bench" .
	$(TARGET_DIR)/release/examples/bench run --n $(N) --contenders $(CONTENDERS) --out target/bench \
		--kiln $(TARGET_DIR)/release/kiln \
		--kube-rs $(TARGET_DIR)/release/examples/bench-kube-rs \
		--controller-runtime "$(BENCH_BIN_DIR)/controller-runtime-bench"

bench-conversion: controlplane ## A rule-defined API listed at the version kiln converts vs the one that stores (N=3000)
	$(CARGO) build --locked --release --bin kiln --example bench
	$(TARGET_DIR)/release/examples/bench conversion --n $(or $(filter-out 100,$(N)),3000) --kiln $(TARGET_DIR)/release/kiln --out target/bench/conversion

bench-webhook: ## One ConversionReview of 10,000 objects to kiln's webhook within its bounds (time, peak memory) and oversized ones refused; no control plane
	$(CARGO) build --locked --release --example bench
	$(TARGET_DIR)/release/examples/bench webhook --n 10000

RULES ?= 1,50,200

bench-rules: controlplane ## kiln, kube-rs and controller-runtime with RULES rules (1,50,200) over N primaries and ten CRDs: RSS per rule and per kind, one-rule edit
	$(CARGO) build --locked --release --bin kiln --example bench --example bench-kube-rs-rules
	cd tests/bench/controller-runtime && go build -mod=readonly -o "$(BENCH_BIN_DIR)/controller-runtime-bench" .
	$(TARGET_DIR)/release/examples/bench rules --rules $(RULES) --n $(N) --out target/bench \
		--kiln $(TARGET_DIR)/release/kiln \
		--kube-rs $(TARGET_DIR)/release/examples/bench-kube-rs-rules \
		--controller-runtime "$(BENCH_BIN_DIR)/controller-runtime-bench"

lint: ## rustfmt and clippy (warnings are errors); go vet of the benchmark's Go controller
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets --locked -- -D warnings
	cd tests/bench/controller-runtime && go vet -mod=readonly ./...

controlplane: ## Build etcd, kube-apiserver, kube-controller-manager, kubectl from Go modules (cached)
	@bash tests/controlplane/build.sh >/dev/null

node: ## As root: also build kube-scheduler, kubelet, kube-proxy for the local node (tests/node.rs, the demo); else nothing
	@if [ "$$(id -u)" = 0 ]; then bash tests/controlplane/build.sh --node >/dev/null; \
	else echo "not root: no local node (tests/node.rs skips)"; fi

cluster-up: controlplane ## Start a local control plane in the background; prints the KUBECONFIG to use
	$(KILN) controlplane up --detach --dir $(CONTROLPLANE_DIR)

cluster-down: ## Stop the control plane started by cluster-up
	$(KILN) controlplane down --dir $(CONTROLPLANE_DIR)
	rm -rf $(CONTROLPLANE_DIR)

deploy-manifests: ## Regenerate deploy/clusterrole.yaml, deploy/rules-configmap.yaml and examples/my-platform/kiln-values.yaml
	$(KILN) rbac --rules rules/ > deploy/clusterrole.yaml
	$(KILN) configmap --rules rules/ > deploy/rules-configmap.yaml
	cd examples/my-platform && $(CARGO) run --quiet --locked --manifest-path ../../Cargo.toml -- \
		package --rules rules/ --format helm-values --out kiln-values.yaml

image: ## OCI image archive of the release binary, no Docker or registry (umoci): target/image/kiln-VERSION.oci.tar
	$(CARGO) build --locked --release --bin kiln
	bash deploy/image.sh $(TARGET_DIR)/release/kiln $(TARGET_DIR)/image

clean: ## Remove build outputs (the control-plane cache outside the repo stays)
	$(CARGO) clean
