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
// Serve* of package lambdafn (or of a package under it, such as
// lambdafn/fanout) it calls and, for ServeAPI, the route groups it mounts.
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
	"GroupApplications": httpapi.GroupApplications,
	"GroupWebhooks":     httpapi.GroupWebhooks,
	"GroupDeliveries":   httpapi.GroupDeliveries,
	"GroupKeys":         httpapi.GroupKeys,
	"GroupDashboard":    httpapi.GroupDashboard,
	"GroupClick":        httpapi.GroupClick,
	"GroupFraud":        httpapi.GroupFraud,
	"GroupAdmin":        httpapi.GroupAdmin,
	"GroupFallback":     httpapi.GroupFallback,
}

// ReadMains parses every functions/*/main.go under root. Each must make
// exactly one call of a package under internal/lambdafn; ServeAPI's
// arguments must be httpapi.Group* constants, and the other Serve
// functions take none.
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
		if id, isID := sel.X.(*ast.Ident); !isID || !lambdafns[id.Name] {
			return true
		}
		calls++
		fn.Serve = sel.Sel.Name
		if fn.Serve != "ServeAPI" && len(call.Args) > 0 {
			err = fmt.Errorf("%s takes no arguments", fn.Serve)
		}
		for _, arg := range call.Args {
			group, ok := "", false
			if s, isSel := arg.(*ast.SelectorExpr); isSel && isIdent(s.X, "httpapi") {
				group, ok = groupConsts[s.Sel.Name]
			}
			if !ok {
				err = fmt.Errorf("an argument of ServeAPI is not a known httpapi.Group* constant")
				return false
			}
			fn.Groups = append(fn.Groups, group)
		}
		return true
	})
	if err == nil && calls != 1 {
		err = fmt.Errorf("main.go must make one Serve* call of a lambdafn package; it makes %d", calls)
	}
	return fn, err
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
