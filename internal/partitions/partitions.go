// Package partitions derives from the code which table partitions each API
// function may write: the dynamodb:LeadingKeys patterns its role's write
// actions need (docs/aws.md, "Least privilege"). It builds the SSA form of
// every functions/<dir> main that serves route groups (api.Serve), and
// finds what the function can call with rapid type analysis (RTA) from its
// main and package initializers. Then it traces the key of every store
// write the call graph reaches (store.Store's Transact and Update) back to
// the internal/keys builders that make it, and reads the partitions off
// their literal prefixes ("BRD#" + …: "BRD#*"), by the action of the
// operation that writes the key (store.Put: PutItem; Increment, an OpUpdate
// or store.Store.Update: UpdateItem; Delete: DeleteItem).
//
// The trace follows values through variables, composite literals, slices
// and append, parameters, results and captured variables; it knows the
// store's contract: store.Put, Delete, Increment and Check make an
// operation on the item or key they are given, Get returns the item at
// its key, and Query the items of its partition (for an index, the table
// partitions of the items put in it: the Key of each store.Item literal
// whose store.IndexKey the index partition's builder makes). A field that
// is neither an item's nor an operation's is traced to every store to it,
// unless reflection could set it. Where a write's key goes anywhere else (a
// map, a global, a conversion), the function gets every partition its code
// names instead, so the result is never short; Function.Untraced says
// where.
//
// Three facts of the code make the analysis sound and precise enough to
// tell functions apart; it checks them rather than assume them:
//
//   - A function mounts only its own groups' routes: httpapi's route table
//     (API.routes) makes every route's handler, but Handler mounts only
//     those of the groups it serves. The analysis leaves out of routes()
//     the making of the other groups' handlers (the cut), after checking
//     that (*API).Handler alone reads a route's handler and that what makes
//     a handler only makes closures (it calls nothing).
//   - Only store/dynamo calls DynamoDB's write actions, and the store
//     writes only the keys of the operations it is given.
//   - No code looks methods up by reflection, which a call graph cannot
//     follow. Where some does (text/template, in the dashboard), the
//     function gets every partition named by every function RTA finds
//     reachable, exported methods of types in interfaces included.
package partitions

import (
	"cmp"
	"errors"
	"fmt"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/callgraph"
	"golang.org/x/tools/go/callgraph/rta"
	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/ssa"
	"golang.org/x/tools/go/ssa/ssautil"

	"github.com/tally-hq/tally/internal/deploy"
)

const (
	module      = "github.com/tally-hq/tally"
	keysPath    = module + "/internal/keys"
	storePath   = module + "/internal/store"
	dynamoPath  = module + "/internal/store/dynamo"
	httpapiPath = module + "/internal/httpapi"
)

// WriteActions are the DynamoDB actions that write an item, as the store's
// operations are authorized: a put, an update (or increment), a delete.
var WriteActions = []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}

// Function is what an API function may write.
type Function struct {
	Dir    string
	Groups []string
	// Writes are, by action (WriteActions), the LeadingKeys patterns of
	// the partitions its writes may name ("BRD#*", "CONFIG"), sorted.
	Writes map[string][]string
	// Untraced is the first write whose key the analysis cannot trace to
	// the builder that makes it, "" when there is none; then Writes is
	// every partition the function's code names, not only those written.
	Untraced string
}

// Derive analyses every API function under root (the module's directory),
// built as `make build` builds them (buildTags; linux/arm64).
func Derive(root, buildTags string) ([]Function, error) {
	mains, err := deploy.ReadMains(root)
	if err != nil {
		return nil, err
	}
	mains = slices.DeleteFunc(mains, func(m deploy.Main) bool { return m.Serve != "ServeAPI" })
	var patterns []string
	for _, m := range mains {
		patterns = append(patterns, "./functions/"+m.Dir)
	}
	cfg := &packages.Config{
		Mode:       packages.LoadAllSyntax,
		Dir:        root,
		Env:        append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"),
		BuildFlags: []string{"-tags", buildTags},
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, err
	}
	if packages.PrintErrors(pkgs) > 0 {
		return nil, errors.New("partitions: the functions do not build")
	}
	a, err := newAnalysis(pkgs)
	if err != nil {
		return nil, err
	}
	if a.root, err = filepath.Abs(root); err != nil {
		return nil, err
	}
	var out []Function
	for _, m := range mains {
		f, err := a.function(m)
		if err != nil {
			return nil, fmt.Errorf("functions/%s: %w", m.Dir, err)
		}
		out = append(out, f)
	}
	return out, nil
}

type analysis struct {
	root      string
	prog      *ssa.Program
	mains     map[string]*ssa.Package // by import path
	syntax    *syntax
	storeType *types.Interface
	routes    *routeTable
}

func newAnalysis(pkgs []*packages.Package) (*analysis, error) {
	prog, spkgs := ssautil.AllPackages(pkgs, ssa.InstantiateGenerics)
	prog.Build()
	a := &analysis{prog: prog, mains: map[string]*ssa.Package{}}
	for _, p := range spkgs {
		if p != nil && p.Pkg.Name() == "main" {
			a.mains[p.Pkg.Path()] = p
		}
	}
	var err error
	if a.syntax, err = newSyntax(pkgs); err != nil {
		return nil, err
	}
	st := prog.ImportedPackage(storePath)
	if st == nil {
		return nil, errors.New("partitions: the functions do not link internal/store")
	}
	a.storeType = st.Members["Store"].(*ssa.Type).Type().Underlying().(*types.Interface)
	if a.routes, err = newRouteTable(prog); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *analysis) function(m deploy.Main) (Function, error) {
	f := Function{Dir: m.Dir, Groups: m.Groups}
	main := a.mains[module+"/functions/"+m.Dir]
	if main == nil {
		return f, errors.New("not loaded")
	}
	roots := []*ssa.Function{main.Func("main"), main.Func("init")}
	restore, err := a.routes.cut(func(group string) bool { return !m.IsFallback() && slices.Contains(m.Groups, group) })
	if err != nil {
		return f, err
	}
	res := rta.Analyze(roots, true)
	restore()
	reach := reachable(res.CallGraph, roots)
	if err := a.checkDynamoWrites(res.CallGraph, reach); err != nil {
		return f, err
	}
	named, writes := reach, []prefix(nil)
	if usesReflectiveMethods(res.CallGraph, reach) {
		// A write may be in a method the call graph does not reach.
		named = map[*ssa.Function]bool{}
		for fn := range res.Reachable {
			named[fn] = true
		}
		f.Untraced = "methods called by reflection"
	} else {
		writes, f.Untraced = a.writes(res.CallGraph, reach, &res.RuntimeTypes)
	}
	if f.Untraced != "" {
		if writes, err = a.syntax.named(named); err != nil {
			return f, err
		}
	}
	f.Writes = map[string][]string{}
	for _, action := range WriteActions {
		var of []prefix
		for _, p := range writes {
			if p.action == action || p.action == "" {
				of = append(of, p)
			}
		}
		if len(of) > 0 {
			f.Writes[action] = patternsOf(of)
		}
	}
	return f, nil
}

// position is pos as file:line:column, the file relative to the module's
// directory; "-" for none (a synthetic wrapper's).
func (a *analysis) position(pos token.Pos) string {
	p := a.prog.Fset.Position(pos)
	if rel, err := filepath.Rel(a.root, p.Filename); err == nil {
		p.Filename = rel
	}
	return p.String()
}

// reachable is what the call graph reaches from roots: RTA also counts as
// reachable every exported method of a type that is ever in an interface
// (reflection could call it), which the call graph does not.
func reachable(g *callgraph.Graph, roots []*ssa.Function) map[*ssa.Function]bool {
	reach := map[*ssa.Function]bool{}
	var stack []*callgraph.Node
	for _, r := range roots {
		stack = append(stack, g.Nodes[r])
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n == nil || reach[n.Func] {
			continue
		}
		reach[n.Func] = true
		for _, e := range n.Out {
			stack = append(stack, e.Callee)
		}
	}
	return reach
}

// usesReflectiveMethods reports whether code outside package reflect looks
// methods up by reflection (reflect.Value.Method, reflect.Type.MethodByName,
// …): a method called that way has no edge in the call graph.
func usesReflectiveMethods(g *callgraph.Graph, reach map[*ssa.Function]bool) bool {
	for fn := range reach {
		if fn.Pkg != nil && fn.Pkg.Pkg.Path() == "reflect" {
			continue
		}
		for _, e := range g.Nodes[fn].Out {
			c := e.Callee.Func
			if c.Pkg != nil && c.Pkg.Pkg.Path() == "reflect" && strings.HasPrefix(c.Name(), "Method") {
				return true
			}
		}
	}
	return false
}

// checkDynamoWrites checks that only store/dynamo calls DynamoDB's write
// actions, so that every write is a store.Store write.
func (a *analysis) checkDynamoWrites(g *callgraph.Graph, reach map[*ssa.Function]bool) error {
	for fn := range reach {
		if fn.Pkg != nil && (fn.Pkg.Pkg.Path() == dynamoPath || strings.HasPrefix(fn.Pkg.Pkg.Path(), "github.com/aws/aws-sdk-go-v2/")) {
			continue
		}
		for _, e := range g.Nodes[fn].Out {
			c := e.Callee.Func
			if c.Pkg == nil || c.Pkg.Pkg.Path() != "github.com/aws/aws-sdk-go-v2/service/dynamodb" || c.Signature.Recv() == nil {
				continue
			}
			switch c.Name() {
			case "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem", "ExecuteStatement", "ExecuteTransaction", "BatchExecuteStatement":
				return fmt.Errorf("%s calls DynamoDB's %s itself; the analysis knows writes only through store.Store", fn, c.Name())
			}
		}
	}
	return nil
}

// A prefix is what a partition key starts with: the whole key when exact.
type prefix struct {
	s     string
	exact bool
	// action is the write that names it (WriteActions), "" for any.
	action string
}

// pattern is the LeadingKeys pattern of the keys that start with p.
func (p prefix) pattern() string {
	if p.exact {
		return p.s
	}
	return p.s + "*"
}

// patternsOf gives the patterns of prefixes, leaving out those another
// covers, sorted.
func patternsOf(prefixes []prefix) []string {
	var out []string
	for _, p := range prefixes {
		covered := slices.ContainsFunc(prefixes, func(q prefix) bool {
			return !q.exact && strings.HasPrefix(p.s, q.s) && (len(q.s) < len(p.s) || p.exact)
		})
		if !covered && !slices.Contains(out, p.pattern()) {
			out = append(out, p.pattern())
		}
	}
	slices.SortFunc(out, func(x, y string) int { return cmp.Compare(x, y) })
	return out
}

// Covers reports whether the LeadingKeys pattern covers every key the
// derived pattern want stands for (want "BRD#*": any key that starts with
// BRD#; "CONFIG": that key alone). Patterns are IAM's StringLike: * is any
// run of characters, ? any one.
func Covers(pattern, want string) bool {
	if s, ok := strings.CutSuffix(want, "*"); ok {
		q, ok := strings.CutSuffix(pattern, "*")
		return ok && !strings.ContainsAny(q, "*?") && strings.HasPrefix(s, q)
	}
	return StringLike(pattern, want)
}

// StringLike matches s against an IAM StringLike pattern: * is any run of
// characters, ? any one, everything else itself.
func StringLike(pattern, s string) bool {
	for pattern != "" {
		switch pattern[0] {
		case '*':
			for i := len(s); i >= 0; i-- {
				if StringLike(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		default:
			if s == "" || s[0] != pattern[0] {
				return false
			}
		}
		pattern, s = pattern[1:], s[1:]
	}
	return s == ""
}
