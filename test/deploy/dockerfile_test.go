package deploy

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// imageTarget is one Dockerfile target and the image `make image` builds
// from it.
type imageTarget struct {
	Target, Image, Binary string
	// Packages are the Debian packages the image must install.
	Packages []string
}

// imageTargets lists every image; the last is the Dockerfile's default
// target, so that `docker build .` keeps building the attacher, as
// upstream's csi-attacher image runs the attacher.
var imageTargets = []imageTarget{
	{Target: "controller", Image: "fenceline-controller", Binary: "fenceline-controller"},
	// The exec fence method runs ClusterLabs fence agents; fence_ipmilan
	// runs ipmitool, which Debian's fence-agents does not depend on.
	{Target: "fence-agent", Image: "fenceline-fence-agent", Binary: "fenceline-fence-agent", Packages: []string{"fence-agents", "ipmitool"}},
	{Target: "mock-driver", Image: "fenceline-mock-driver", Binary: "mock-driver"},
	{Target: "attacher", Image: "fenceline-attacher", Binary: "fenceline-attacher"},
}

// imageOf returns the image that carries binary, or "".
func imageOf(binary string) string {
	for _, it := range imageTargets {
		if it.Binary == binary {
			return it.Image
		}
	}
	return ""
}

var (
	builderImage = regexp.MustCompile(`^golang:(\d+\.\d+)\.\d+-(bookworm)(@sha256:[0-9a-f]{64})?$`)
	// Runtime bases, pinned to a Debian release (a date tag or a digest
	// pins further); never :latest or a floating "stable".
	distrolessImage = regexp.MustCompile(`^gcr\.io/distroless/static-debian(\d+):nonroot(@sha256:[0-9a-f]{64})?$`)
	debianImage     = regexp.MustCompile(`^debian:(bookworm|\d+)(\.\d+|-\d{8})?-slim(@sha256:[0-9a-f]{64})?$`)
	// ociLabels must be set on every image; the value pattern says where
	// it comes from.
	ociLabels = map[string]*regexp.Regexp{
		"org.opencontainers.image.version":     regexp.MustCompile(`^\$\{?VERSION\}?$`),
		"org.opencontainers.image.revision":    regexp.MustCompile(`^\$\{?REVISION\}?$`),
		"org.opencontainers.image.source":      regexp.MustCompile(`^\$\{?SOURCE\}?$`),
		"org.opencontainers.image.licenses":    regexp.MustCompile(`^Apache-2\.0$`),
		"org.opencontainers.image.title":       nil, // the image name, checked per image
		"org.opencontainers.image.description": regexp.MustCompile(`\S{3,}`),
	}
	buildArg = regexp.MustCompile(`\$\{?([A-Z_]+)\}?`)
)

// debianRelease returns the Debian major release an image is built on, or
// "" for an unknown base.
func debianRelease(image string) string {
	codenames := map[string]string{"bookworm": "12", "trixie": "13"}
	if m := builderImage.FindStringSubmatch(image); m != nil {
		return codenames[m[2]]
	}
	if m := distrolessImage.FindStringSubmatch(image); m != nil {
		return m[1]
	}
	if m := debianImage.FindStringSubmatch(image); m != nil {
		if r, ok := codenames[m[1]]; ok {
			return r
		}
		return m[1]
	}
	return ""
}

func TestDockerfile(t *testing.T) {
	_, stages := parseDockerfile(t, readRepoFile(t, "Dockerfile"))
	build := stageNamed(t, stages, "build")
	checkBuilder(t, build)

	t.Run("every binary make build produces has an image", func(t *testing.T) {
		for _, b := range imageBinaries(t) {
			if imageOf(b) == "" {
				t.Errorf("binary %s has no image target", b)
			}
		}
	})

	t.Run("docker build without a target builds the attacher", func(t *testing.T) {
		if last := stages[len(stages)-1]; last.Name != "attacher" {
			t.Errorf("last stage is %q, want attacher: upstream's csi-attacher image runs the attacher, and so must `docker build .`", last.Name)
		}
	})

	for _, it := range imageTargets {
		t.Run(it.Target, func(t *testing.T) {
			tg, err := resolveTarget(stages, it.Target)
			if err != nil {
				t.Fatal(err)
			}
			checkBase(t, tg, debianRelease(build.Image))
			checkUser(t, tg)
			checkBinary(t, tg, it.Binary, build.Name)
			checkLabels(t, tg, it.Image)
			checkPackages(t, tg, it.Packages)
		})
	}
}

func stageNamed(t *testing.T, stages []stage, name string) stage {
	t.Helper()
	for _, s := range stages {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("Dockerfile has no stage %q", name)
	return stage{}
}

// checkBuilder: an exact Go release matching go.mod, on the build machine's
// platform, cross-compiling with `make build` as CI does.
func checkBuilder(t *testing.T, build stage) {
	t.Run("builder is an exact Go release matching go.mod", func(t *testing.T) {
		m := builderImage.FindStringSubmatch(build.Image)
		if m == nil {
			t.Fatalf("builder image %q is not pinned as golang:<major>.<minor>.<patch>-bookworm[@sha256:...]", build.Image)
		}
		if want := goMinor(t, readRepoFile(t, "go.mod")); m[1] != want {
			t.Errorf("builder Go %s, go.mod wants go %s", m[1], want)
		}
	})

	t.Run("builder runs on the build platform and cross-compiles with make build", func(t *testing.T) {
		if p := flagValue(build.Flags, "platform"); p != "$BUILDPLATFORM" && p != "${BUILDPLATFORM}" {
			t.Errorf("builder FROM --platform=%q, want $BUILDPLATFORM (compile natively, no emulation)", p)
		}
		for _, arg := range []string{"TARGETOS", "TARGETARCH"} {
			if !build.declares(arg) {
				t.Errorf("builder stage does not declare ARG %s, so it would be empty", arg)
			}
		}
		makeBuild := regexp.MustCompile(`(^|[;&|]\s*)((\w+=\S+\s+)*)make build(\s|$)`)
		var env string
		var found bool
		for _, run := range build.all("RUN") {
			if m := makeBuild.FindStringSubmatch(run.Args); m != nil {
				found, env = true, m[2]
			}
		}
		if !found {
			t.Fatal("no RUN make build in the builder stage; the images must be built the way CI builds")
		}
		for _, want := range []string{`GOOS="${TARGETOS}"`, `GOARCH="${TARGETARCH}"`} {
			if !strings.Contains(env, want) {
				t.Errorf("make build runs with %q, want %s", env, want)
			}
		}
		recipe := makeRecipe(t, readRepoFile(t, "Makefile"), "build")
		if !strings.Contains(recipe, "CGO_ENABLED=0") {
			t.Errorf("make build does not set CGO_ENABLED=0, so the binaries may not be static:\n%s", recipe)
		}
	})

	t.Run("module download layer has the go.mod of every local replace", func(t *testing.T) { checkModuleDownload(t, build) })
}

// checkModuleDownload: the layer that downloads modules, cached apart from
// the sources, can resolve the module graph, local replaces included.
func checkModuleDownload(t *testing.T, build stage) {
	download := 0
	for _, run := range build.all("RUN") {
		if strings.Contains(run.Args, "go mod download") {
			download = run.Line
			break
		}
	}
	if download == 0 {
		return
	}
	var copied []string
	for _, in := range build.all("COPY") {
		if in.Line < download {
			copied = append(copied, strings.Fields(in.Args)...)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^replace\s+\S+\s+=>\s+\./(\S+)\s*$`).FindAllStringSubmatch(readRepoFile(t, "go.mod"), -1) {
		if want := m[1] + "/go.mod"; !slices.Contains(copied, want) {
			t.Errorf("go.mod replaces a module with ./%s, but no COPY before line %d (go mod download) copies %s", m[1], download, want)
		}
	}
}

// checkBase: distroless static (no shell, so no RUN) or Debian slim, pinned
// to the builder's Debian release.
func checkBase(t *testing.T, tg target, release string) {
	base := tg.base()
	switch {
	case distrolessImage.MatchString(base.Image):
		for _, in := range tg.all("RUN") {
			t.Errorf("line %d: RUN on distroless, which has no shell", in.Line)
		}
	case debianImage.MatchString(base.Image):
	default:
		t.Fatalf("base image %q (line %d), want gcr.io/distroless/static-debian<N>:nonroot or debian:<release>-slim, optionally @sha256:<digest>", base.Image, base.Line)
	}
	if got := debianRelease(base.Image); got != release {
		t.Errorf("base %s is Debian %s, the builder Debian %s; keep one release", base.Image, got, release)
	}
	if flagValue(base.Flags, "platform") != "" {
		t.Errorf("runtime base %s has a --platform flag; it must follow the target platform", base.Image)
	}
}

// checkUser: a numeric non-root user, so that runAsNonRoot can verify it
// without /etc/passwd.
func checkUser(t *testing.T, tg target) {
	user, ok := tg.last("USER")
	if !ok {
		t.Fatal("image sets no USER")
	}
	m := regexp.MustCompile(`^(\d+)(:(\d+))?$`).FindStringSubmatch(user.Args)
	if m == nil {
		t.Fatalf("line %d: USER %s, want numeric uid[:gid]", user.Line, user.Args)
	}
	if m[1] == "0" || m[3] == "0" {
		t.Errorf("line %d: USER %s runs as root", user.Line, user.Args)
	}
	for _, s := range tg.Chain {
		for _, in := range s.Body {
			if in.Cmd == "RUN" && in.Line > user.Line {
				t.Errorf("line %d: RUN after USER (line %d) would run as the image user; install first", in.Line, user.Line)
			}
		}
	}
}

// checkBinary: exactly the target's binary, from the builder, at /, as the
// exec-form entrypoint.
func checkBinary(t *testing.T, tg target, binary, builder string) {
	var copied []string
	for _, in := range tg.all("COPY") {
		from := flagValue(in.Flags, "from")
		if from != builder {
			t.Errorf("line %d: COPY from %q, want only built binaries from the %s stage", in.Line, from, builder)
			continue
		}
		parts := strings.Fields(in.Args)
		if dst := parts[len(parts)-1]; dst != "/" {
			t.Errorf("line %d: binaries copied to %s, want / (manifests run /<binary>)", in.Line, dst)
		}
		for _, src := range parts[:len(parts)-1] {
			copied = append(copied, src[strings.LastIndex(src, "/")+1:])
		}
	}
	if !slices.Equal(copied, []string{binary}) {
		t.Errorf("image carries %q, want only %s", copied, binary)
	}
	ep, ok := tg.last("ENTRYPOINT")
	if !ok {
		t.Fatal("image has no ENTRYPOINT")
	}
	var argv []string
	if err := json.Unmarshal([]byte(ep.Args), &argv); err != nil || len(argv) == 0 {
		t.Fatalf("line %d: ENTRYPOINT %s is not a JSON exec form: %v", ep.Line, ep.Args, err)
	}
	if argv[0] != "/"+binary {
		t.Errorf("line %d: ENTRYPOINT %q, want /%s", ep.Line, argv, binary)
	}
}

// checkLabels: every OCI label, the title being the image name, and each
// build argument a label uses declared in the stage that sets it (a stage
// sees no global ARG it does not declare, and the label would be empty).
func checkLabels(t *testing.T, tg target, image string) {
	labels, from, err := tg.labels()
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range ociLabels {
		v, ok := labels[key]
		switch {
		case !ok:
			t.Errorf("label %s missing", key)
			continue
		case want == nil && v != image:
			t.Errorf("label %s = %q, want %q", key, v, image)
		case want != nil && !want.MatchString(v):
			t.Errorf("label %s = %q, want %s", key, v, want)
		}
		for _, m := range buildArg.FindAllStringSubmatch(v, -1) {
			if s := from[key]; !s.declares(m[1]) {
				t.Errorf("label %s uses ${%s}, which stage %s (line %d) does not declare with ARG", key, m[1], s.Name, s.Line)
			}
		}
	}
}

// checkPackages: the Debian packages are installed without recommends, and
// the package lists are not left in the image.
func checkPackages(t *testing.T, tg target, packages []string) {
	var install string
	for _, in := range tg.all("RUN") {
		if strings.Contains(in.Args, "apt-get install") {
			install = in.Args
		}
	}
	if len(packages) == 0 {
		if install != "" {
			t.Errorf("installs packages (%s), want none", install)
		}
		return
	}
	fields := strings.Fields(install)
	for _, p := range packages {
		if !slices.ContainsFunc(fields, func(f string) bool { return f == p || strings.HasPrefix(f, p+"=") }) {
			t.Errorf("package %s not installed (RUN %q)", p, install)
		}
	}
	for _, want := range []string{"--no-install-recommends", "rm -rf /var/lib/apt/lists"} {
		if !strings.Contains(install, want) {
			t.Errorf("apt-get install without %q: %s", want, install)
		}
	}
}

// goMinor returns "1.26" for a go.mod that says "go 1.26.0".
func goMinor(t testing.TB, gomod string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)(\.\d+)?$`).FindStringSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return m[1]
}
