package deploy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tally-hq/tally/internal/httpapi"
)

// Main is what functions/<Dir>/main.go runs, read from its source: the
// kind of its Serve call (serveKinds: ServeAPI for api.Serve, ServeFanout,
// …) and, for ServeAPI, the route groups it mounts.
type Main struct {
	Dir    string
	Serve  string
	Groups []string
}

// IsFallback reports whether the function answers the HTTP API's $default
// route: it serves httpapi.GroupFallback alone.
func (f Main) IsFallback() bool {
	return f.Serve == "ServeAPI" && slices.Equal(f.Groups, []string{httpapi.GroupFallback})
}

// lambdafnPath is the import path of package lambdafn; the packages under
// it serve functions too.
const lambdafnPath = "github.com/tally-hq/tally/internal/lambdafn"

// groupConsts resolves httpapi.Group* names in a main; a group added to
// httpapi without a line here makes ReadMains fail, not pass silently.
var groupConsts = map[string]string{
	"GroupOffers":       httpapi.GroupOffers,
	"GroupPartners":     httpapi.GroupPartners,
	"GroupConversions":  httpapi.GroupConversions,
	"GroupReports":      httpapi.GroupReports,
	"GroupPayouts":      httpapi.GroupPayouts,
	"GroupApplications": httpapi.GroupApplications,
	"GroupWebhooks":     httpapi.GroupWebhooks,
	"GroupDeliveries":   httpapi.GroupDeliveries,
	"GroupKeys":         httpapi.GroupKeys,
	"GroupDashboard":    httpapi.GroupDashboard,
	"GroupClick":        httpapi.GroupClick,
	"GroupFraud":        httpapi.GroupFraud,
	"GroupAdmin":        httpapi.GroupAdmin,
	"GroupFallback":     httpapi.GroupFallback,
	"GroupHealth":       httpapi.GroupHealth,
}

// ReadMains parses every functions/*/main.go under root. Each must make
// exactly one Serve call of a package under internal/lambdafn (serveKinds);
// api.Serve's groups must be httpapi.Group* constants, and the other Serve
// functions take nothing.
func ReadMains(root string) ([]Main, error) {
	dirs, err := os.ReadDir(filepath.Join(root, "functions"))
	if err != nil {
		return nil, err
	}
	var fns []Main
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		fn, err := readMain(filepath.Join(root, "functions", d.Name(), "main.go"))
		if err != nil {
			return nil, fmt.Errorf("functions/%s: %w", d.Name(), err)
		}
		fn.Dir = d.Name()
		fns = append(fns, fn)
	}
	if len(fns) == 0 {
		return nil, fmt.Errorf("no functions in %s", filepath.Join(root, "functions"))
	}
	return fns, nil
}

func readMain(file string) (Main, error) {
	var fn Main
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		return fn, err
	}
	// The names the file gives the lambdafn packages it imports.
	lambdafns := map[string]bool{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if p != lambdafnPath && !strings.HasPrefix(p, lambdafnPath+"/") {
			continue
		}
		name := path.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		lambdafns[name] = true
	}
	calls := 0
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || err != nil {
			return err == nil
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, isID := sel.X.(*ast.Ident)
		if !isID || !lambdafns[id.Name] || !strings.HasPrefix(sel.Sel.Name, "Serve") {
			return true
		}
		calls++
		fn.Serve = serveKinds[id.Name+"."+sel.Sel.Name]
		switch {
		case fn.Serve == "":
			err = fmt.Errorf("%s.%s is no function's Serve call", id.Name, sel.Sel.Name)
		case fn.Serve != "ServeAPI" && len(call.Args) > 0:
			err = fmt.Errorf("%s.%s takes no arguments", id.Name, sel.Sel.Name)
		case fn.Serve == "ServeAPI":
			fn.Groups, err = groupsOf(call.Args)
		}
		return err == nil
	})
	if err == nil && calls != 1 {
		err = fmt.Errorf("main.go must make one Serve call of a lambdafn package; it makes %d", calls)
	}
	return fn, err
}

// serveKinds names each Serve function of the lambdafn packages, by the
// name a main imports its package under.
var serveKinds = map[string]string{
	"api.Serve":              "ServeAPI",
	"fanout.ServeFanout":     "ServeFanout",
	"fanout.ServeReconciler": "ServeReconciler",
	"deliver.ServeDeliver":   "ServeDeliver",
	"attempt.Serve":          "ServeAttempt",
	"approve.Serve":          "ServeApprover",
	"rollup.Serve":           "ServeRollup",
}

// groupsOf reads api.Serve's first argument, a []string literal of
// httpapi.Group* constants (the options after it are not read).
func groupsOf(args []ast.Expr) ([]string, error) {
	lit, ok := []ast.Expr(nil), false
	if len(args) > 0 {
		var cl *ast.CompositeLit
		if cl, ok = args[0].(*ast.CompositeLit); ok {
			lit = cl.Elts
		}
	}
	if !ok || len(lit) == 0 {
		return nil, fmt.Errorf("api.Serve's first argument must be a []string of httpapi.Group* constants")
	}
	var groups []string
	for _, e := range lit {
		group, known := "", false
		if s, isSel := e.(*ast.SelectorExpr); isSel && isIdent(s.X, "httpapi") {
			group, known = groupConsts[s.Sel.Name]
		}
		if !known {
			return nil, fmt.Errorf("an argument of ServeAPI is not a known httpapi.Group* constant")
		}
		groups = append(groups, group)
	}
	return groups, nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
