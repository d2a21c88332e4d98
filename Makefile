# Fenceline build, test and demo entry points. Run `make help` for a summary.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

GO            ?= go
BIN_DIR       := $(CURDIR)/bin
CACHE_DIR     := $(CURDIR)/.cache
TOOLS_BIN     := $(CACHE_DIR)/tools/bin
KUBE_VERSION  := v1.37.2
KUBE_MINOR    := 37
# The oldest Kubernetes minor Fenceline supports (docs/compatibility.md):
# `make e2e-oldest` runs the end-to-end suite on its control plane, built
# from test/tools/kube-oldest into a tools directory of its own. Keep it in
# step with that module's k8s.io/kubernetes requirement.
KUBE_VERSION_OLDEST := v1.29.15
KUBE_MINOR_OLDEST   := 29
UPSTREAM_ATTACHER_VERSION := v4.13.0
# Cluster API, whose MachineHealthCheck controller checks Fenceline's
# external remediation end to end; keep it in step with test/tools/capi's
# sigs.k8s.io/cluster-api requirement.
CAPI_VERSION := v1.14.2

# Pinned developer tools, installed through the Go module proxy.
STATICCHECK_VERSION        := v0.8.2
BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
CODE_GENERATOR_VERSION     := v0.37.2
CONTROLLER_TOOLS_VERSION   := v0.23.0

# The k8s.io/code-generator commands hack/update-codegen.sh runs.
CODE_GENERATORS := deepcopy-gen client-gen lister-gen informer-gen applyconfiguration-gen

BINARIES := fenceline-attacher fenceline-controller fenceline-fence-agent mock-driver
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X fenceline.io/fenceline/pkg/version.Version=$(VERSION)

# kube_ldflags stamps a Kubernetes binary built from the module proxy with
# its version ($(1)) and minor ($(2)), as upstream's release build does, so
# that /version and the components' skew checks see the real one.
kube_ldflags = -X k8s.io/component-base/version.gitVersion=$(1) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(2) \
	-X k8s.io/client-go/pkg/version.gitVersion=$(1) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 \
	-X k8s.io/client-go/pkg/version.gitMinor=$(2)
KUBE_LDFLAGS        := $(call kube_ldflags,$(KUBE_VERSION),$(KUBE_MINOR))
KUBE_LDFLAGS_OLDEST := $(call kube_ldflags,$(KUBE_VERSION_OLDEST),$(KUBE_MINOR_OLDEST))

# Tests find the control-plane binaries and our own binaries here.
export FENCELINE_TOOLS_DIR := $(TOOLS_BIN)
export FENCELINE_BIN_DIR   := $(BIN_DIR)

TEST_TIMEOUT ?= 45m

# The fence extension is a module of its own (drivers import it without this
# module's Kubernetes and Go pins); `go test ./...` from the root does not
# descend into it, so the test, lint and build targets run it explicitly.
FENCE_MODULE := pkg/fence
# The release tool (make release) is one too, so that its image and SBOM
# libraries stay out of this module's go.mod; the same targets run it.
RELEASE_MODULE := hack/release
# So are the Helm chart's tests and its end-to-end story (test/helm/e2e),
# so that the Helm library stays out of this module's go.mod.
HELM_MODULE := test/helm

.PHONY: help
help: ## Show this help.
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build every binary into bin/.
	@mkdir -p $(BIN_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN_DIR)/ \
		./cmd/fenceline-attacher ./cmd/fenceline-controller ./cmd/fenceline-fence-agent ./mock-driver \
		./cmd/kubectl-fenceline

.PHONY: fence-sanity
fence-sanity: ## Build the fence-sanity conformance command (see docs/fence-sanity.md) into bin/.
	@mkdir -p $(BIN_DIR)
	cd $(FENCE_MODULE) && CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN_DIR)/ ./cmd/fence-sanity

# The local control plane, built from the Go module proxy in this order, then
# promtool for the alerting rules' tests (test/monitoring).
KUBE_TOOLS    := kube-apiserver kube-controller-manager kube-scheduler kubectl
CONTROL_PLANE := etcd $(KUBE_TOOLS) kwok
# A real kubelet and a fake CRI for real-kubelet nodes, from the same
# pinned Kubernetes module as the control plane.
NODE_TOOLS    := kubelet fake-cri
TOOLS         := $(CONTROL_PLANE) promtool

# Progress of the first, long builds: each tool build says [n/total], where
# total counts the tools this run will build (those missing among the ones
# its goals need). The goal lists name the targets whose prerequisites
# include tools, upstream-attacher and upstream-e2e; test/deploy checks them
# against the rules below.
GOALS_NEEDING_CONTROL_PLANE     := control-plane tools test conformance demo demo-manual demo-iscsi demo-real-kubelet up bench bench-scale bench-scale-attacher chaos
GOALS_NEEDING_PROMTOOL          := promtool tools test test-unit
GOALS_NEEDING_UPSTREAM_ATTACHER := upstream-attacher test bench tools-oldest
GOALS_NEEDING_UPSTREAM_E2E      := upstream-e2e test conformance
GOALS_NEEDING_NODE_TOOLS        := node-tools test demo-real-kubelet bench chaos
GOALS_NEEDING_CAPI              := capi test
needed_tools = $(if $(filter $(GOALS_NEEDING_CONTROL_PLANE),$(MAKECMDGOALS)),$(CONTROL_PLANE)) \
	$(if $(filter $(GOALS_NEEDING_PROMTOOL),$(MAKECMDGOALS)),promtool) \
	$(if $(filter $(GOALS_NEEDING_UPSTREAM_ATTACHER),$(MAKECMDGOALS)),csi-attacher) \
	$(if $(filter $(GOALS_NEEDING_UPSTREAM_E2E),$(MAKECMDGOALS)),e2e-node.test) \
	$(if $(filter $(GOALS_NEEDING_NODE_TOOLS),$(MAKECMDGOALS)),$(NODE_TOOLS)) \
	$(if $(filter $(GOALS_NEEDING_CAPI),$(MAKECMDGOALS)),capi-mhc)
MISSING_TOOLS := $(strip $(foreach t,$(needed_tools),$(if $(wildcard $(TOOLS_BIN)/$(t)),,$(t))))
# $(call upto,NAME,LIST): LIST's words up to and including NAME.
upto = $(if $(2),$(firstword $(2))$(if $(filter $(1),$(firstword $(2))),, $(call upto,$(1),$(wordlist 2,$(words $(2)),$(2)))))
# $(call step,NAME): "[n/total] " for a tool of MISSING_TOOLS; nothing for a
# rebuild after a go.mod change, which was not counted.
step = $(if $(filter $(1),$(MISSING_TOOLS)),[$(words $(call upto,$(1),$(MISSING_TOOLS)))/$(words $(MISSING_TOOLS))] )

# Says, before the prerequisites build, that a goal waits on the first tool
# build; list it first among a goal's prerequisites.
.PHONY: tools-notice
tools-notice:
	@$(if $(MISSING_TOOLS),echo "$(tools_notice)",:)

tools_notice = >> make $(firstword $(filter-out tools-notice,$(MAKECMDGOALS))) waits on a first build of \
	$(words $(MISSING_TOOLS)) tools from the Go module proxy into .cache/tools ($(MISSING_TOOLS)): 20 to 40 minutes on two cores, later runs reuse them

.PHONY: tools control-plane promtool
tools: tools-notice control-plane promtool ## Build the local control plane (etcd, kube-*, kwok) and promtool from the module proxy.

# The demo, the benchmarks and chaos need only the control plane.
control-plane: tools-notice $(addprefix $(TOOLS_BIN)/,$(CONTROL_PLANE))

promtool: tools-notice $(TOOLS_BIN)/promtool $(TOOLS_BIN)/prometheus

# One go build per binary, so that progress shows; the first one compiles
# most of Kubernetes, the others reuse the build cache.
$(addprefix $(TOOLS_BIN)/,$(KUBE_TOOLS)): $(TOOLS_BIN)/%: test/tools/kube/go.mod test/tools/kube/go.sum
	@mkdir -p $(TOOLS_BIN)
	@echo ">> $(call step,$*)building $* $(KUBE_VERSION)$(if $(filter kube-apiserver,$*), (the first build compiles most of Kubernetes: the longest step))"
	cd test/tools/kube && $(GO) build -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/$*

.PHONY: node-tools
node-tools: tools-notice $(addprefix $(TOOLS_BIN)/,$(NODE_TOOLS)) ## Build a real kubelet and a fake CRI (no container runtime) for real-kubelet nodes.

$(TOOLS_BIN)/kubelet: test/tools/kube/go.mod test/tools/kube/go.sum
	@mkdir -p $(TOOLS_BIN)
	@echo ">> $(call step,kubelet)building kubelet $(KUBE_VERSION) (after the control plane: a few minutes)"
	cd test/tools/kube && $(GO) build -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/kubelet

$(TOOLS_BIN)/fake-cri: test/tools/kube/go.mod test/tools/kube/go.sum $(wildcard test/tools/kube/fakecri/*.go)
	@mkdir -p $(TOOLS_BIN)
	@echo ">> $(call step,fake-cri)building fake-cri"
	cd test/tools/kube && $(GO) build -o $@ ./fakecri

$(TOOLS_BIN)/etcd: test/tools/etcd/go.mod test/tools/etcd/go.sum
	@mkdir -p $(TOOLS_BIN)
	@echo ">> $(call step,etcd)building etcd"
	cd test/tools/etcd && $(GO) build -o $@ go.etcd.io/etcd/server/v3

$(TOOLS_BIN)/kwok: test/tools/kwok/go.mod test/tools/kwok/go.sum
	@mkdir -p $(TOOLS_BIN)
	@echo ">> $(call step,kwok)building kwok"
	cd test/tools/kwok && $(GO) build -o $@ sigs.k8s.io/kwok/cmd/kwok

# promtool checks and unit-tests deploy/monitoring's alerting rules and the
# dashboard's queries; promql-metrics (from the same module, so Prometheus
# stays out of the main go.mod) lists the metrics an expression selects; the
# Prometheus server scrapes a local world and evaluates the rules on its real
# metrics. remove_all_sd leaves out the service-discovery plugins (cloud
# SDKs), which neither checking rules nor static scrape targets need.
$(TOOLS_BIN)/promtool $(TOOLS_BIN)/promql-metrics $(TOOLS_BIN)/prometheus &: test/tools/promtool/go.mod test/tools/promtool/go.sum test/tools/promtool/promql-metrics/main.go
	@mkdir -p $(TOOLS_BIN)
	@echo ">> $(call step,promtool)building promtool and the Prometheus server"
	cd test/tools/promtool && $(GO) build -tags remove_all_sd -o $(TOOLS_BIN)/ github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus ./promql-metrics
	@touch $(TOOLS_BIN)/promtool $(TOOLS_BIN)/promql-metrics $(TOOLS_BIN)/prometheus
# The oldest supported minor's control plane, beside the newest one's.
# etcd and KWOK are not per minor: the tools' etcd v3.6 serves every
# supported kube-apiserver, and KWOK only drives the API; they are copied,
# and so is upstream's csi-attacher, which runs beside Fenceline in one
# end-to-end test.
TOOLS_OLDEST_BIN := $(CACHE_DIR)/tools-oldest/bin
KUBE_COMMANDS    := kube-apiserver kube-controller-manager kube-scheduler kubectl

.PHONY: tools-oldest
tools-oldest: tools-notice upstream-attacher $(addprefix $(TOOLS_OLDEST_BIN)/,$(KUBE_COMMANDS) etcd kwok csi-attacher) ## Build the oldest supported minor's control plane (KUBE_VERSION_OLDEST) into .cache/tools-oldest.

$(addprefix $(TOOLS_OLDEST_BIN)/,$(KUBE_COMMANDS)) &: test/tools/kube-oldest/go.mod test/tools/kube-oldest/go.sum
	@mkdir -p $(TOOLS_OLDEST_BIN)
	@echo ">> building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $(KUBE_VERSION_OLDEST) (first time: 20 to 40 minutes on two cores)"
	cd test/tools/kube-oldest && $(GO) build -ldflags '$(KUBE_LDFLAGS_OLDEST)' -o $(TOOLS_OLDEST_BIN)/ \
		$(addprefix k8s.io/kubernetes/cmd/,$(KUBE_COMMANDS))
	@touch $(addprefix $(TOOLS_OLDEST_BIN)/,$(KUBE_COMMANDS))

$(TOOLS_OLDEST_BIN)/etcd $(TOOLS_OLDEST_BIN)/kwok $(TOOLS_OLDEST_BIN)/csi-attacher: $(TOOLS_OLDEST_BIN)/%: $(TOOLS_BIN)/%
	@mkdir -p $(TOOLS_OLDEST_BIN)
	cp $< $@

# E2E_RUN picks end-to-end tests by name (go test -run) for e2e-oldest.
E2E_RUN ?= .
# The subset CI runs on the oldest minor (.ci/run): the fencing API, and the
# stories that lean on behaviour that changed between minors
# (TestHelmInstallFailover is the Helm module's: e2e-oldest runs its e2e
# package with the same regexp).
E2E_OLDEST_CI_RUN := ^(TestFencingAPI|TestNonGracefulShutdown|TestUpstreamContrast|TestTaintEvictionMatchesUpstream|TestTaintEvictionKEP2268|TestTaintEvictionStandsDownBesideUpstream|TestHelmInstallFailover|TestSafeDetachWithoutHuman|TestAttacherDownAcrossHeal|TestStrictDriverWaitsForTaint)$$

.PHONY: e2e-oldest
e2e-oldest: build tools-oldest ## Run the end-to-end suite and the fencing API's validation tests on the oldest supported minor's control plane (E2E_RUN=regexp picks tests).
	FENCELINE_TOOLS_DIR=$(TOOLS_OLDEST_BIN) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(E2E_RUN)' ./test/fencingapi ./test/e2e
	cd $(HELM_MODULE) && FENCELINE_TOOLS_DIR=$(TOOLS_OLDEST_BIN) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(E2E_RUN)' ./e2e

.PHONY: e2e-oldest-ci
e2e-oldest-ci: ## e2e-oldest with CI's subset (E2E_OLDEST_CI_RUN).
	$(MAKE) e2e-oldest E2E_RUN='$(E2E_OLDEST_CI_RUN)'

.PHONY: upstream-e2e
upstream-e2e: tools-notice $(TOOLS_BIN)/e2e-node.test ## Build upstream's node e2e specs (NoExecuteTaintManager) from the module proxy.

# Upstream's test/e2e/node with the e2e framework only (not all of
# test/e2e), as a test binary; test/conformance runs it.
$(TOOLS_BIN)/e2e-node.test: test/tools/e2e/go.mod test/tools/e2e/go.sum test/tools/e2e/e2e_test.go
	@mkdir -p $(TOOLS_BIN)
	@echo ">> $(call step,e2e-node.test)building upstream's node e2e tests $(KUBE_VERSION) (after the control plane: a few minutes)"
	cd test/tools/e2e && $(GO) test -c -ldflags '$(KUBE_LDFLAGS)' -o $@ .

.PHONY: capi
capi: tools-notice $(TOOLS_BIN)/capi-mhc ## Build Cluster API's MachineHealthCheck controller (alone) and copy the CRDs it reads, from the module proxy.

# capi-mhc runs only Cluster API's MachineHealthCheck reconciler (see
# test/tools/capi); the CRDs it reads come from the same pinned module's
# core/config/crd/bases, copied into capi-crds beside it before it is built.
CAPI_CRDS := clusters machines machinehealthchecks
$(TOOLS_BIN)/capi-mhc: test/tools/capi/go.mod test/tools/capi/go.sum test/tools/capi/main.go
	@mkdir -p $(TOOLS_BIN)/capi-crds
	@echo ">> $(call step,capi-mhc)building capi-mhc, Cluster API $(CAPI_VERSION)'s MachineHealthCheck controller alone (a few minutes)"
	cd test/tools/capi && $(GO) mod download sigs.k8s.io/cluster-api && dir=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api) && \
		for c in $(CAPI_CRDS); do install -m 0644 "$$dir/core/config/crd/bases/cluster.x-k8s.io_$$c.yaml" $(TOOLS_BIN)/capi-crds/; done
	cd test/tools/capi && $(GO) build -o $@ .

.PHONY: test
test: tools-notice build control-plane promtool upstream-attacher upstream-e2e node-tools capi ## Run every test: unit, fuzz seeds, csi-sanity, fence-sanity, integration, end-to-end and upstream's taint-eviction e2e specs.
	@echo ">> go test: compiling and running the fence extension's tests, the release tool's (a release for this machine's architecture built for a test version; make release builds every one), the Helm chart's, then every package's (compiling takes minutes on a cold build cache)"
	cd $(FENCE_MODULE) && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd $(RELEASE_MODULE) && FENCELINE_RELEASE_ARCHES=$$($(GO) env GOARCH) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd $(HELM_MODULE) && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

.PHONY: test-unit
test-unit: tools-notice promtool ## Fast loop: unit tests only (tests needing a control plane are skipped with -short; promtool is built).
	cd $(FENCE_MODULE) && $(GO) test -short -count=1 ./...
	cd $(RELEASE_MODULE) && $(GO) test -short -count=1 ./...
	cd $(HELM_MODULE) && $(GO) test -short -count=1 ./...
	$(GO) test -short -count=1 ./...

# Which taint eviction `make conformance` holds to upstream's specs:
# kube-controller-manager, fenceline, or all (see test/conformance).
TAINT_EVICTION ?= all

.PHONY: conformance
conformance: tools-notice build control-plane upstream-e2e ## Upstream's NoExecuteTaintManager e2e specs against taint eviction (TAINT_EVICTION=fenceline|kube-controller-manager|all).
	FENCELINE_TAINT_EVICTION=$(TAINT_EVICTION) $(GO) test -count=1 -v -timeout 30m -run TestNoExecuteTaintManager ./test/conformance

.PHONY: demo
demo: tools-notice build control-plane ## Start a local cluster, hang a node, and show it fenced through its BMC and failed over with no human.
	@echo ">> compiling the demo (go run ./test/cmd/demo)"
	$(GO) run ./test/cmd/demo

.PHONY: demo-manual
demo-manual: tools-notice build control-plane ## The manual story: an operator applies the out-of-service taint to a powered-off node.
	@echo ">> compiling the demo (go run ./test/cmd/demo)"
	$(GO) run ./test/cmd/demo --manual

.PHONY: demo-real-kubelet
demo-real-kubelet: tools-notice build control-plane node-tools ## The no-human story with the lost node run by a real kubelet on a fake container runtime (root); DEMO_ARGS=--manual tells the operator's story.
	@echo ">> compiling the demo (go run ./test/cmd/demo)"
	$(GO) run ./test/cmd/demo --real-kubelet $(DEMO_ARGS)

.PHONY: demo-iscsi
demo-iscsi: tools-notice build control-plane ## The manual story on a real iSCSI target (Debian's tgt, root): a zombie's session is ended by the fence, judged on the LUN's bytes (DEMO_FENCE_METHOD=acl+sessions|pr|acl).
	@echo ">> compiling the demo (go run ./test/cmd/demo)"
	$(GO) run ./test/cmd/demo --manual --backend=tgt --fence-method=$(DEMO_FENCE_METHOD)

# The fence method of `make demo-iscsi`; acl is no fence, to watch the
# byte checker catch it.
DEMO_FENCE_METHOD ?= acl+sessions

.PHONY: up
up: tools-notice build control-plane ## Start the local cluster with Fenceline (and a simulated BMC per node) and leave it running.
	@echo ">> compiling the demo (go run ./test/cmd/demo)"
	$(GO) run ./test/cmd/demo --up

.PHONY: down
down: ## Stop a cluster started by `make up`.
	$(GO) run ./test/cmd/demo --down

.PHONY: upstream-attacher
upstream-attacher: tools-notice $(TOOLS_BIN)/csi-attacher ## Build upstream external-attacher (the benchmarks' baseline) from the module proxy.

$(TOOLS_BIN)/csi-attacher: test/tools/upstream-attacher/go.mod test/tools/upstream-attacher/go.sum
	@mkdir -p $(TOOLS_BIN)
	@echo ">> $(call step,csi-attacher)building upstream csi-attacher $(UPSTREAM_ATTACHER_VERSION)"
	cd test/tools/upstream-attacher && $(GO) build -ldflags '-X main.version=$(UPSTREAM_ATTACHER_VERSION)' -o $@ \
		github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher

.PHONY: bench
bench: tools-notice build control-plane upstream-attacher node-tools ## Run the benchmarks (failover against upstream and on a real-kubelet node, attach throughput, the cost of a fence on a real iSCSI target).
	@mkdir -p bench-results
	$(GO) test -run '^$$' -bench '^Benchmark(Failover|AttachThroughput|FenceCost)' -benchtime 1x -timeout 120m ./test/bench/...

# The scale benchmark (KWOK clusters up to 5,000 nodes and 50,000 pods):
# SCALE_SIZES=NODESxPODS,... picks sizes; about 35 minutes for the default
# four on 2 cores, most of it creating the 50,000 pods.
SCALE_SIZES ?=

.PHONY: bench-scale
bench-scale: tools-notice build control-plane ## Run the scale benchmark (1,000 to 50,000 pods on KWOK nodes).
	@mkdir -p bench-results
	FENCELINE_BENCH_SCALE_SIZES=$(SCALE_SIZES) $(GO) test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 3h ./test/bench/...

# The attacher's scale benchmark (5,000 to 50,000 VolumeAttachments, 10 a
# KWOK node): SCALE_VAS=N,... picks the counts; about an hour for the
# default three on 2 cores, most of it the attacher's 3 writes per attach at
# --kube-api-qps=100.
SCALE_VAS ?=

.PHONY: bench-scale-attacher
bench-scale-attacher: tools-notice build control-plane ## Run the attacher's scale benchmark (5,000 to 50,000 VolumeAttachments on KWOK nodes).
	@mkdir -p bench-results
	FENCELINE_BENCH_SCALE_VAS=$(SCALE_VAS) $(GO) test -run '^$$' -bench '^BenchmarkScaleAttacher$$' -benchtime 1x -timeout 4h ./test/bench/...

# Randomized failover episodes (test/chaos): CHAOS_EPISODES seeds from
# CHAOS_FIRST_SEED, CHAOS_PARALLEL at once; SEED=<n>[,<n>...] reruns those
# exactly. The log goes to test/output/chaos.log; the summary ends it.
# An episode mostly waits (grace periods, leases, heals), so 4 control
# planes at once fit 2 cores.
CHAOS_EPISODES   ?= 200
CHAOS_FIRST_SEED ?= 1
CHAOS_PARALLEL   ?= 4
SEED             ?=

.PHONY: chaos
chaos: tools-notice build control-plane node-tools ## Randomized failover episodes with faults, checked for broken invariants (SEED=n reruns one).
	@mkdir -p test/output
	@echo ">> chaos: episodes on local control planes, $(CHAOS_PARALLEL) at a time; one line per episode, full log in test/output/chaos.log"
	@set +e; FENCELINE_CHAOS_SEED=$(SEED) FENCELINE_CHAOS_EPISODES=$(CHAOS_EPISODES) FENCELINE_CHAOS_FIRST_SEED=$(CHAOS_FIRST_SEED) \
		FENCELINE_CHAOS_PARALLEL=$(CHAOS_PARALLEL) $(GO) test -count=1 -v -timeout 4h -run '^TestChaos$$' ./test/chaos 2>&1 \
		| tee test/output/chaos.log | grep --line-buffered -E 'chaos_test.go:[0-9]+: seed=[0-9]+ .*(episode [0-9.]+s|invariant violations|harness failed)'; \
		rc=$${PIPESTATUS[0]}; echo; \
		grep -E 'chaos: |^\s{2,}(node-fencing|operator|safe-detach) ' test/output/chaos.log; \
		grep -E -A3 'invariant violations|harness failed' test/output/chaos.log; exit $$rc

.PHONY: lint
lint: ## gofmt, go vet and staticcheck.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd $(FENCE_MODULE) && $(GO) vet ./...
	cd $(RELEASE_MODULE) && $(GO) vet ./...
	cd $(HELM_MODULE) && $(GO) vet ./...
	@test -x $(TOOLS_BIN)/staticcheck || GOBIN=$(TOOLS_BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(TOOLS_BIN)/staticcheck ./...
	cd $(FENCE_MODULE) && $(TOOLS_BIN)/staticcheck ./...
	cd $(RELEASE_MODULE) && $(TOOLS_BIN)/staticcheck ./...
	cd $(HELM_MODULE) && $(TOOLS_BIN)/staticcheck ./...

.PHONY: generate-tools
generate-tools:
	@test -x $(TOOLS_BIN)/buf || GOBIN=$(TOOLS_BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@test -x $(TOOLS_BIN)/protoc-gen-go || GOBIN=$(TOOLS_BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@test -x $(TOOLS_BIN)/protoc-gen-go-grpc || GOBIN=$(TOOLS_BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@for g in $(CODE_GENERATORS); do \
		test -x $(TOOLS_BIN)/$$g || GOBIN=$(TOOLS_BIN) $(GO) install k8s.io/code-generator/cmd/$$g@$(CODE_GENERATOR_VERSION); \
	done
	@test -x $(TOOLS_BIN)/controller-gen || GOBIN=$(TOOLS_BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: generate
generate: generate-tools ## Regenerate the Go code from the .proto files and from the fencing API types (clients, CRDs).
	PATH=$(TOOLS_BIN):$$PATH buf generate
	cd mock-driver && PATH=$(TOOLS_BIN):$$PATH buf generate
	TOOLS_BIN=$(TOOLS_BIN) hack/update-codegen.sh

# Container images, one per component, from the Dockerfile's targets (see
# docs/deploy.md): $(IMAGE_REGISTRY)/fenceline-<target>:$(IMAGE_TAG).
# PLATFORMS (e.g. linux/amd64,linux/arm64) and IMAGE_PUSH=true need docker
# buildx; an image for more than one platform must be pushed (or loaded into
# a containerd image store).
IMAGE_TARGETS  := attacher controller fence-agent mock-driver
IMAGE_REGISTRY ?=
IMAGE_TAG      ?= $(VERSION)
PLATFORMS      ?=
IMAGE_PUSH     ?=
REVISION       ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE_SOURCE   ?= https://fenceline.io/fenceline

.PHONY: image
image: ## Build the four images, fenceline-{attacher,controller,fence-agent,mock-driver} (needs Docker; IMAGE_REGISTRY, IMAGE_TAG, PLATFORMS, IMAGE_PUSH).
	@command -v docker >/dev/null 2>&1 || { echo "make image: no docker command; building the images needs Docker (with buildx for PLATFORMS or IMAGE_PUSH)" >&2; exit 1; }
	@if docker buildx version >/dev/null 2>&1; then \
		build=(docker buildx build $(if $(PLATFORMS),--platform=$(PLATFORMS)) $(if $(filter true,$(IMAGE_PUSH)),--push,--load)); \
	elif [ -n "$(PLATFORMS)$(filter true,$(IMAGE_PUSH))" ]; then \
		echo "make image: PLATFORMS and IMAGE_PUSH need docker buildx, which is not installed" >&2; exit 1; \
	else \
		build=(docker build); \
	fi; \
	n=0; for t in $(IMAGE_TARGETS); do \
		n=$$((n+1)); image=$(if $(IMAGE_REGISTRY),$(IMAGE_REGISTRY)/)fenceline-$$t:$(IMAGE_TAG); \
		echo ">> [$$n/$(words $(IMAGE_TARGETS))] building image $$image (Dockerfile target $$t)"; \
		"$${build[@]}" --target "$$t" --tag "$$image" \
			--build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) --build-arg SOURCE=$(IMAGE_SOURCE) .; \
	done

# A release without a container engine, by hack/release (a module of its
# own, so that go-containerregistry stays out of go.mod): static binaries
# for RELEASE_ARCHES with SHA256SUMS, multi-arch OCI image layouts of the
# attacher, the controller and the mock driver, the Helm chart, an SPDX
# SBOM per artifact, into $(RELEASE_DIR)/$(VERSION). It refuses a VERSION
# that is not vX.Y.Z[-pre] and one CHANGELOG.md has no section for. The
# fence agent's image needs Debian packages and stays with `make image`.
# See docs/release.md.
RELEASE_DIR    ?= $(CURDIR)/_output/release
RELEASE_ARCHES ?= amd64 arm64

.PHONY: release
release: ## Build release VERSION=vX.Y.Z into _output/release/VERSION without Docker: binaries, OCI image layouts, Helm chart, SBOMs, SHA256SUMS.
	@echo ">> release $(VERSION): compiling the release tool ($(RELEASE_MODULE)), then the binaries for linux: $(RELEASE_ARCHES)"
	cd $(RELEASE_MODULE) && $(GO) run . --version='$(VERSION)' --repo='$(CURDIR)' --out='$(RELEASE_DIR)/$(VERSION)' \
		--arches='$(RELEASE_ARCHES)' --source='$(IMAGE_SOURCE)' --go='$(GO)'

.PHONY: clean
clean: ## Remove built binaries (keeps the tool cache).
	rm -rf $(BIN_DIR)
