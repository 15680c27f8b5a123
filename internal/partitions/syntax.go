package partitions

import (
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/ast/astutil"
	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/ssa"
)

// syntax reads the partitions off the source: the prefix of each
// internal/keys builder, and which table partitions the items of each index
// partition are in.
type syntax struct {
	fset  *token.FileSet
	infos map[*types.Package]*types.Info
	funcs map[types.Object]*ast.FuncDecl // internal/keys's functions
	// builders are the partition prefixes of the keys builders: every
	// function of internal/keys whose result (a store.Key's PK, or a string)
	// starts with a literal. The others make sort keys or take keys apart.
	builders map[types.Object][]prefix
	// indexed are the table partitions of the items an index partition
	// holds, by what names the index partition (a keys builder or a
	// constant): an item found in an index can be written by its key.
	indexed map[types.Object][]prefix
	// indexOnly are the builders whose every use is an index partition key
	// (a store.IndexKey's, or a store.Query's or records.Partition's that
	// names an index): what they build is never a table key, and what is
	// found with them is in indexed.
	indexOnly map[types.Object]bool
}

func newSyntax(pkgs []*packages.Package) (*syntax, error) {
	s := &syntax{infos: map[*types.Package]*types.Info{}, funcs: map[types.Object]*ast.FuncDecl{},
		builders: map[types.Object][]prefix{}, indexed: map[types.Object][]prefix{}, indexOnly: map[types.Object]bool{}}
	var ours []*packages.Package
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		s.infos[p.Types] = p.TypesInfo
		s.fset = p.Fset
		if strings.HasPrefix(p.PkgPath, module+"/") {
			ours = append(ours, p)
		}
	})
	for _, p := range ours {
		if p.PkgPath != keysPath {
			continue
		}
		for _, f := range p.Syntax {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
					s.funcs[p.TypesInfo.Defs[fd.Name]] = fd
				}
			}
		}
	}
	if len(s.funcs) == 0 {
		return nil, errors.New("partitions: internal/keys not loaded")
	}
	for obj := range s.funcs {
		ps, err := s.builder(obj, 0)
		if err != nil {
			return nil, err
		}
		if ps != nil {
			s.builders[obj] = ps
		}
	}
	indexUses := map[*ast.Ident]bool{}
	for _, p := range ours {
		for _, f := range p.Syntax {
			if err := s.indexKeys(p.TypesInfo, f); err != nil {
				return nil, err
			}
			indexPKs(p.TypesInfo, f, indexUses)
		}
	}
	tableUse := map[types.Object]bool{}
	for _, p := range ours {
		for id, obj := range p.TypesInfo.Uses {
			if s.builders[obj] == nil {
				continue
			}
			if indexUses[id] {
				if !tableUse[obj] {
					s.indexOnly[obj] = true
				}
			} else {
				tableUse[obj] = true
				delete(s.indexOnly, obj)
			}
		}
	}
	return s, nil
}

// indexPKs notes the builders f calls for an index partition key: in a
// store.IndexKey, or in a store.Query or records.Partition that sets Index.
func indexPKs(info *types.Info, f *ast.File, uses map[*ast.Ident]bool) {
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		t := info.TypeOf(lit)
		index := isNamed(t, storePath, "IndexKey")
		if !index && !isNamed(t, storePath, "Query") && !isNamed(t, module+"/internal/records", "Partition") {
			return true
		}
		var pk *ast.CallExpr
		for _, elt := range lit.Elts {
			kv, ok := elt.(*ast.KeyValueExpr)
			switch {
			case !ok:
			case isIdent(kv.Key, "PK"):
				pk, _ = ast.Unparen(kv.Value).(*ast.CallExpr)
			case isIdent(kv.Key, "Index"):
				tv := info.Types[kv.Value]
				index = tv.Value == nil || constant.StringVal(tv.Value) != ""
			}
		}
		if pk == nil || !index {
			return true
		}
		switch fun := ast.Unparen(pk.Fun).(type) {
		case *ast.Ident:
			uses[fun] = true
		case *ast.SelectorExpr:
			uses[fun.Sel] = true
		}
		return true
	})
}

// builder gives the partition prefixes of the keys function obj, nil when
// it builds no partition key.
func (s *syntax) builder(obj types.Object, depth int) ([]prefix, error) {
	fd := s.funcs[obj]
	sig := obj.Type().(*types.Signature)
	if fd == nil || sig.Results().Len() != 1 || depth > 10 {
		return nil, nil
	}
	info := s.infos[obj.Pkg()]
	isKey := isNamed(sig.Results().At(0).Type(), storePath, "Key")
	if !isKey && !isString(sig.Results().At(0).Type()) {
		return nil, nil
	}
	var out []prefix
	var err error
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.ReturnStmt:
			e := n.Results[0]
			if isKey {
				e, err = s.pkOf(info, e)
			}
			if err == nil {
				var ps []prefix
				ps, err = s.eval(info, e, depth)
				out = append(out, ps...)
			}
		}
		return err == nil
	})
	if err != nil {
		return nil, fmt.Errorf("keys.%s: %w", obj.Name(), err)
	}
	unknown := 0
	for _, p := range out {
		if p.s == "" {
			unknown++
		}
	}
	switch {
	case unknown == 0:
		return out, nil
	case unknown == len(out) && !isKey:
		return nil, nil // a sort key or a part of one
	default:
		return nil, fmt.Errorf("keys.%s builds a partition key that does not start with a literal; the analysis cannot tell its partition", obj.Name())
	}
}

// pkOf is the partition key of a store.Key expression in internal/keys: a
// composite literal's PK, or another builder's call, returned as is.
func (s *syntax) pkOf(info *types.Info, e ast.Expr) (ast.Expr, error) {
	switch e := ast.Unparen(e).(type) {
	case *ast.CompositeLit:
		for _, elt := range e.Elts {
			if kv, ok := elt.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "PK") {
				return kv.Value, nil
			}
		}
	case *ast.CallExpr:
		return e, nil
	}
	return nil, fmt.Errorf("a key at %s whose partition key the analysis cannot read", s.fset.Position(e.Pos()))
}

// eval gives the literal prefixes a string expression of internal/keys
// starts with: "" when it starts with anything else.
func (s *syntax) eval(info *types.Info, e ast.Expr, depth int) ([]prefix, error) {
	e = ast.Unparen(e)
	if tv := info.Types[e]; tv.Value != nil && tv.Value.Kind() == constant.String {
		return []prefix{{s: constant.StringVal(tv.Value), exact: true}}, nil
	}
	switch e := e.(type) {
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			break
		}
		left, err := s.eval(info, e.X, depth)
		if err != nil {
			return nil, err
		}
		var out []prefix
		for _, l := range left {
			if !l.exact {
				out = append(out, l)
				continue
			}
			right, err := s.eval(info, e.Y, depth)
			if err != nil {
				return nil, err
			}
			for _, r := range right {
				out = append(out, prefix{s: l.s + r.s, exact: r.exact})
			}
		}
		return out, nil
	case *ast.CallExpr:
		obj := calleeOf(info, e)
		if obj == nil {
			break
		}
		if obj.Pkg().Path() == "fmt" && obj.Name() == "Sprintf" {
			if tv := info.Types[e.Args[0]]; tv.Value != nil {
				format := constant.StringVal(tv.Value)
				lit, _, verb := strings.Cut(format, "%")
				return []prefix{{s: lit, exact: !verb}}, nil
			}
		}
		if s.funcs[obj] != nil {
			ps, err := s.builder(obj, depth+1)
			if err != nil || ps != nil {
				return ps, err
			}
		}
	}
	return []prefix{{}}, nil
}

// indexKeys notes the table partitions of the items that each
// store.IndexKey literal of f puts in an index partition.
func (s *syntax) indexKeys(info *types.Info, f *ast.File) error {
	var err error
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok || err != nil || !isNamed(info.TypeOf(lit), storePath, "IndexKey") {
			return err == nil
		}
		var pk ast.Expr
		for _, elt := range lit.Elts {
			if kv, ok := elt.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "PK") {
				pk = kv.Value
			}
		}
		if pk == nil {
			return true // the item leaves the index
		}
		at := s.fset.Position(lit.Pos())
		src := sourceOf(info, pk)
		if src == nil {
			err = fmt.Errorf("%s: an index partition key neither a keys builder's nor a constant", at)
			return false
		}
		key := s.itemKey(info, f, lit)
		if key == nil {
			err = fmt.Errorf("%s: cannot find the key of the item this index key is for", at)
			return false
		}
		obj := calleeOf(info, key)
		ps := s.builders[obj]
		if ps == nil {
			err = fmt.Errorf("%s: the item's key is not a keys builder's call", at)
			return false
		}
		s.indexed[src] = append(s.indexed[src], ps...)
		return true
	})
	return err
}

// itemKey finds the Key of the store.Item the index key literal is given
// to: the Item literal it is a field of, or the one assigned to the
// variable whose GSI field it is assigned to.
func (s *syntax) itemKey(info *types.Info, f *ast.File, lit *ast.CompositeLit) *ast.CallExpr {
	path, _ := astutil.PathEnclosingInterval(f, lit.Pos(), lit.End())
	var item *ast.CompositeLit
	switch p := path[1].(type) {
	case *ast.KeyValueExpr:
		item, _ = path[2].(*ast.CompositeLit)
	case *ast.AssignStmt:
		sel, ok := p.Lhs[0].(*ast.SelectorExpr)
		if !ok || len(p.Lhs) != 1 {
			return nil
		}
		v, ok := sel.X.(*ast.Ident)
		if !ok {
			return nil
		}
		obj := info.Uses[v]
		var fn ast.Node
		for _, n := range path {
			if _, ok := n.(*ast.FuncDecl); ok {
				fn = n
				break
			}
		}
		if fn == nil {
			return nil
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
				return true
			}
			if id, ok := as.Lhs[0].(*ast.Ident); ok && (info.Defs[id] == obj || info.Uses[id] == obj) {
				if c, ok := as.Rhs[0].(*ast.CompositeLit); ok {
					item = c
				}
			}
			return true
		})
	}
	if item == nil || !isNamed(info.TypeOf(item), storePath, "Item") {
		return nil
	}
	for _, elt := range item.Elts {
		if kv, ok := elt.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Key") {
			call, _ := ast.Unparen(kv.Value).(*ast.CallExpr)
			return call
		}
	}
	return nil
}

// named gives the partitions the code of fns names: the keys builders it
// calls or takes as values, and the table partitions of the items of the
// index partitions it names.
func (s *syntax) named(fns map[*ssa.Function]bool) ([]prefix, error) {
	seen := map[ast.Node]bool{}
	var out []prefix
	for fn := range fns {
		if fn.Origin() != nil {
			fn = fn.Origin()
		}
		body := fn.Syntax()
		if body == nil || seen[body] || fn.Pkg == nil {
			continue
		}
		seen[body] = true
		info := s.infos[fn.Pkg.Pkg]
		if info == nil {
			return nil, fmt.Errorf("partitions: no syntax for %s", fn)
		}
		ast.Inspect(body, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if obj := info.Uses[id]; obj != nil {
					if !s.indexOnly[obj] {
						out = append(out, s.builders[obj]...)
					}
					out = append(out, s.indexed[obj]...)
				}
			}
			return true
		})
	}
	return out, nil
}

// sourceOf is what names an index partition key: the keys builder called,
// or the constant.
func sourceOf(info *types.Info, e ast.Expr) types.Object {
	switch e := ast.Unparen(e).(type) {
	case *ast.CallExpr:
		if obj := calleeOf(info, e); obj != nil && obj.Pkg().Path() == keysPath {
			return obj
		}
	case *ast.Ident:
		if c, ok := info.Uses[e].(*types.Const); ok {
			return c
		}
	case *ast.SelectorExpr:
		if c, ok := info.Uses[e.Sel].(*types.Const); ok {
			return c
		}
	}
	return nil
}

// calleeOf is the package-level function a call calls, nil for any other.
func calleeOf(info *types.Info, call *ast.CallExpr) types.Object {
	var id *ast.Ident
	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = fun
	case *ast.SelectorExpr:
		id = fun.Sel
	default:
		return nil
	}
	if f, ok := info.Uses[id].(*types.Func); ok && f.Type().(*types.Signature).Recv() == nil {
		return f
	}
	return nil
}

func isNamed(t types.Type, path, name string) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == path && n.Obj().Name() == name
}

func isString(t types.Type) bool {
	b, ok := t.Underlying().(*types.Basic)
	return ok && b.Kind() == types.String
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
