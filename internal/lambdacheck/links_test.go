package lambdacheck_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/lambdacheck"
	"github.com/tally-hq/tally/internal/reporoot"
)

const module = "github.com/tally-hq/tally"

// A link is a package a function must (not) link, and why: a clause that
// follows "which" (must not) or "yet" (must) in the test's messages.
type link struct {
	pkg string // import path, matched exactly (not the packages under it)
	why string
}

var (
	delivery = module + "/internal/delivery"
	httpapi  = module + "/internal/httpapi"

	// What only functions that send, sign users in or render pages need.
	// The webhook package is not here: besides signing, it holds the
	// signing schemes' key formats (whsec_ secrets, whpk_ public keys),
	// which every function that creates or reads subscriptions checks and
	// derives.
	noSending = []link{
		{delivery, "makes the delivery attempts (signed POSTs to receivers): only deliver and attempt send"},
		{"golang.org/x/crypto/argon2", "hashes passwords: only sign-in needs it"},
		{"html/template", "renders the dashboard's pages: 3.4 MiB more in every function that links it"},
	}
	// What the webhook pipeline, which serves no request, does not need.
	noAPI = []link{
		{httpapi, "holds the HTTP API's handlers: the pipeline serves no request"},
		{module + "/internal/fraud", "scores clicks (embedded range and bot lists): the pipeline sees no click"},
	}
	// The other direction, so that a go list that lists too little (the
	// wrong packages, tags or platform) cannot pass.
	servesAPI = []link{{httpapi, "it serves its API group"}, {emf, "it publishes its requests' metrics"}}
	sends     = []link{{delivery, "it makes the delivery attempts"}, {emf, "it publishes its attempts' metrics"}}
	emf       = module + "/internal/emf"

	// The KMS calls that unwrap the data key sealing webhook signing
	// secrets: only the functions that sign or set secrets have
	// kms:Decrypt.
	kmsClient = module + "/internal/awskms"
	noSecrets = []link{{kmsClient, "unwraps the key of the webhook signing secrets: only deliver, attempt, webhooks and dashboard sign or set them"}}
	secrets   = link{kmsClient, "it signs or sets webhook signing secrets"}
)

// everyFunction holds for all functions: `make build`'s tags drop the
// first two, so that one showing up means go list does not see what make
// build links (or a dependency found another way to them); the Prometheus
// client is the local server's.
var everyFunction = []link{
	{"net/rpc", "is aws-lambda-go's RPC mode, dropped by -tags lambda.norpc"},
	{"vendor/golang.org/x/net/http2/hpack", "is net/http's HTTP/2, dropped by -tags nethttpomithttp2"},
	{"github.com/prometheus/client_golang/prometheus", "is the local server's metrics: a function publishes EMF lines (internal/emf)"},
	{module + "/internal/metrics", "serves the local server's Prometheus metrics: a function publishes EMF lines (internal/emf)"},
}

// linkRules maps each functions/<dir> to what it must not link and what it
// must. A function missing here fails the test rather than falling under a
// default: a default would hold a new API function to the pipeline's rules
// or the pipeline to the API's, so which it may link is written down when
// it is added ({} when nothing is ruled out yet).
var linkRules = map[string]struct{ mustNot, must []link }{
	// API functions that neither send nor sign.
	"offers":       {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	"partners":     {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	"conversions":  {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	"reports":      {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	"payouts":      {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	"click":        {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	"applications": {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	"keys":         {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	"fraud":        {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	"health":       {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},

	// API functions that queue a delivery (a test event, a manual retry,
	// a recovery) but leave its attempts to deliver and attempt, and the
	// fallback, which calls nothing.
	// webhooks sets signing secrets; the delivery log shows signatures
	// masked, signed with stand-ins.
	"webhooks":   {mustNot: noSending, must: append(servesAPI, secrets)},
	"deliveries": {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	"fallback":   {mustNot: slices.Concat(noSending, noSecrets), must: servesAPI},
	// The dashboard signs its users in (argon2), sets signing secrets, and
	// sends nothing.
	"dashboard": {mustNot: noSending[:1], must: append(servesAPI, secrets)},

	// The webhook pipeline.
	"fanout":     {mustNot: slices.Concat(noAPI, noSecrets)},
	"reconciler": {mustNot: slices.Concat(noAPI, noSecrets)},
	"deliver":    {mustNot: noAPI, must: append(sends, secrets)},
	"attempt":    {mustNot: noAPI, must: append(sends, secrets)},

	// The jobs on conversions and reports serve no request and send nothing.
	"approver": {mustNot: slices.Concat(noAPI, noSending, noSecrets), must: []link{{emf, "it publishes the approvals' metrics"}}},
	"rollup":   {mustNot: slices.Concat(noAPI, noSending, noSecrets)},
}

// TestFunctionLinks checks, with one `go list -deps` of every function as
// `make build` builds it (linux/arm64, its tags), that each links only
// what it uses: linkRules. On a failure it names the function, the package,
// a shortest import chain that pulls it in and every package of the
// function that imports it: where to cut.
func TestFunctionLinks(t *testing.T) {
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "functions"))
	if err != nil {
		t.Fatal(err)
	}
	var fns []string
	for _, e := range entries {
		if e.IsDir() {
			fns = append(fns, e.Name())
		}
	}
	if len(fns) == 0 {
		t.Fatal("no functions/*")
	}
	for _, dir := range slices.Sorted(maps.Keys(linkRules)) {
		if !slices.Contains(fns, dir) {
			t.Errorf("linkRules has rules for functions/%s, which does not exist: drop them", dir)
		}
	}

	// The functions, and every package a rule names, so that go list fails
	// on a rule that names none.
	var pkgs []string
	for _, dir := range fns {
		pkgs = append(pkgs, module+"/functions/"+dir)
	}
	links := everyFunction
	for _, r := range linkRules {
		links = slices.Concat(links, r.mustNot, r.must)
	}
	for _, l := range links {
		if !slices.Contains(pkgs, l.pkg) {
			pkgs = append(pkgs, l.pkg)
		}
	}
	deps, err := lambdacheck.Deps(t.Context(), root, "arm64", pkgs...)
	if err != nil {
		t.Fatal(err)
	}

	short := func(pkg string) string { return strings.TrimPrefix(pkg, module+"/") }
	for _, dir := range fns {
		main := module + "/functions/" + dir
		if p, ok := deps[main]; !ok || p.Name != "main" {
			t.Errorf("go list did not list functions/%s as a main package", dir)
			continue
		}
		r, ok := linkRules[dir]
		if !ok {
			t.Errorf("functions/%s has no link rules: add it to linkRules in internal/lambdacheck/links_test.go "+
				"with the packages it must not link, each with a reason ({} if none yet)", dir)
		}
		for _, l := range slices.Concat(r.mustNot, everyFunction) {
			chain := lambdacheck.Chain(deps, main, l.pkg)
			if chain == nil {
				continue
			}
			imps := lambdacheck.Importers(deps, main, l.pkg)
			for i, p := range chain {
				chain[i] = short(p)
			}
			for i, p := range imps {
				imps[i] = short(p)
			}
			t.Errorf("functions/%s links %s, which %s\n\tchain: %s\n\timported by: %s",
				dir, short(l.pkg), l.why, strings.Join(chain, " -> "), strings.Join(imps, ", "))
		}
		for _, l := range r.must {
			if lambdacheck.Chain(deps, main, l.pkg) == nil {
				t.Errorf("functions/%s does not link %s, yet %s: does go list see what make build links?", dir, short(l.pkg), l.why)
			}
		}
	}
}
