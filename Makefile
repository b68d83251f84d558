# Kiln's developer entry points. `make help` lists them.

CARGO            ?= cargo
CONTROLPLANE_DIR ?= .kiln/controlplane
KILN             := $(CARGO) run --quiet --locked --

.PHONY: help build run test fuzz lint controlplane cluster-up cluster-down deploy-manifests clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## Build the kiln binary
	$(CARGO) build --locked

run: controlplane ## The demo: example rules, CRDs and objects on $KUBECONFIG's cluster, or on a local control plane
	$(KILN) demo

test: lint controlplane ## Lints, unit tests and integration tests against a real local control plane
	$(CARGO) test --locked

fuzz: ## Long property-based fuzzing of YAML, rule loading and templates (FUZZ_CASES, default 20000)
	PROPTEST_CASES=$${FUZZ_CASES:-20000} $(CARGO) test --locked --release --test fuzz

lint: ## rustfmt and clippy (warnings are errors)
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets --locked -- -D warnings

controlplane: ## Build etcd, kube-apiserver, kube-controller-manager, kubectl from Go modules (cached)
	@bash tests/controlplane/build.sh >/dev/null

cluster-up: controlplane ## Start a local control plane in the background; prints the KUBECONFIG to use
	$(KILN) controlplane up --detach --dir $(CONTROLPLANE_DIR)

cluster-down: ## Stop the control plane started by cluster-up
	$(KILN) controlplane down --dir $(CONTROLPLANE_DIR)
	rm -rf $(CONTROLPLANE_DIR)

deploy-manifests: ## Regenerate deploy/clusterrole.yaml and deploy/rules-configmap.yaml from rules/
	$(KILN) rbac --rules rules/ > deploy/clusterrole.yaml
	$(KILN) configmap --rules rules/ > deploy/rules-configmap.yaml

clean: ## Remove build outputs (the control-plane cache outside the repo stays)
	$(CARGO) clean
