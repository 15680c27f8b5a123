package partitions

import (
	"fmt"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/callgraph"
	"golang.org/x/tools/go/ssa"
)

// What a traced value is.
type kind int

const (
	kKey  kind = iota // store.Key
	kItem             // store.Item: its Key
	kOp               // store.Op: its Key, or its Item's
	kOps              // []store.Op
)

// writes traces the key of every store.Store write the call graph reaches
// (Transact, Update) back to the keys builders that make it. When some
// write's key cannot be traced that way (one read back from the table, or
// passed through a slice, a map or a struct other than the operation's own
// literal), it returns where that write is instead.
func (a *analysis) writes(g *callgraph.Graph, reach map[*ssa.Function]bool) (prefixes []prefix, untraced string) {
	t := &tracer{a: a, g: g, reach: reach, seen: map[traced]bool{}}
	for fn := range reach {
		for _, e := range g.Nodes[fn].Out {
			if e.Site == nil || !a.isStoreWrite(e.Callee.Func) {
				continue
			}
			args := e.Site.Common().Args
			if !e.Site.Common().IsInvoke() {
				args = args[1:] // the receiver
			}
			k := kOp
			if e.Callee.Func.Name() == "Transact" {
				k = kOps
			}
			ps, ok := t.trace(args[1], k)
			if !ok {
				return nil, fmt.Sprintf("%s (%s)", a.position(e.Site.Pos()), fn)
			}
			prefixes = append(prefixes, ps...)
		}
	}
	return prefixes, ""
}

// isStoreWrite reports whether fn is the Transact or Update method of a
// store.Store.
func (a *analysis) isStoreWrite(fn *ssa.Function) bool {
	recv := fn.Signature.Recv()
	if recv == nil || (fn.Name() != "Transact" && fn.Name() != "Update") {
		return false
	}
	return types.Implements(recv.Type(), a.storeType)
}

type tracer struct {
	a     *analysis
	g     *callgraph.Graph
	reach map[*ssa.Function]bool
	seen  map[traced]bool
}

type traced struct {
	v ssa.Value
	k kind
}

// trace gives the partition prefixes of what v, of kind k, may hold.
func (t *tracer) trace(v ssa.Value, k kind) ([]prefix, bool) {
	if t.seen[traced{v, k}] {
		return nil, true // already followed on this path or another
	}
	t.seen[traced{v, k}] = true
	switch v := v.(type) {
	case *ssa.Phi:
		var out []prefix
		for _, e := range v.Edges {
			ps, ok := t.trace(e, k)
			if !ok {
				return nil, false
			}
			out = append(out, ps...)
		}
		return out, true
	case *ssa.Parameter:
		return t.parameter(v, k)
	case *ssa.UnOp:
		if v.Op == token.MUL {
			return t.load(v.X, k)
		}
	case *ssa.Field:
		if k == kKey && fieldOf(v.X.Type(), v.Field) == "Key" && isNamed(v.X.Type(), storePath, "Item") {
			return t.trace(v.X, kItem)
		}
	case *ssa.Call:
		return t.call(v, k)
	case *ssa.Slice:
		if k == kOps {
			return t.array(v.X)
		}
	}
	return nil, false
}

// call traces the result of a keys builder (a key) or of store.Put,
// Delete, Increment or Check (an operation on the key, or the item, it is
// given).
func (t *tracer) call(c *ssa.Call, k kind) ([]prefix, bool) {
	callee := c.Call.StaticCallee()
	if callee == nil || callee.Pkg == nil {
		return nil, false
	}
	switch callee.Pkg.Pkg.Path() {
	case keysPath:
		if ps := t.a.syntax.builders[callee.Object()]; k == kKey && ps != nil {
			return ps, true
		}
	case storePath:
		if k != kOp {
			break
		}
		switch callee.Name() {
		case "Put":
			return t.trace(c.Call.Args[0], kItem)
		case "Delete", "Increment", "Check":
			return t.trace(c.Call.Args[0], kKey)
		}
	}
	return nil, false
}

// parameter traces a parameter to what every call of its function in the
// call graph passes.
func (t *tracer) parameter(p *ssa.Parameter, k kind) ([]prefix, bool) {
	fn := p.Parent()
	i := -1
	for j, q := range fn.Params {
		if q == p {
			i = j
		}
	}
	n := t.g.Nodes[fn]
	if n == nil || len(n.In) == 0 {
		return nil, false
	}
	var out []prefix
	for _, e := range n.In {
		if !t.reach[e.Caller.Func] {
			continue
		}
		if e.Site == nil {
			return nil, false // a call by reflection
		}
		common := e.Site.Common()
		args := common.Args
		if common.IsInvoke() {
			args = append([]ssa.Value{common.Value}, args...)
		}
		if len(args) != len(fn.Params) {
			return nil, false
		}
		ps, ok := t.trace(args[i], k)
		if !ok {
			return nil, false
		}
		out = append(out, ps...)
	}
	return out, true
}

// load traces what is loaded from addr: a local variable or composite
// literal whose every use is a load or a store of it or of one of its
// fields, or a closure's captured variable of such.
func (t *tracer) load(addr ssa.Value, k kind) ([]prefix, bool) {
	switch addr := addr.(type) {
	case *ssa.FreeVar:
		return t.freeVar(addr, func(v ssa.Value) ([]prefix, bool) { return t.load(v, k) })
	case *ssa.Alloc:
		var out []prefix
		add := func(v ssa.Value, k kind) bool {
			ps, ok := t.trace(v, k)
			out = append(out, ps...)
			return ok
		}
		wrote := false
		for _, ref := range *addr.Referrers() {
			switch ref := ref.(type) {
			case *ssa.UnOp, *ssa.DebugRef:
			case *ssa.Store:
				if ref.Addr != addr || !add(ref.Val, k) {
					return nil, false
				}
				wrote = true
			case *ssa.FieldAddr:
				field := fieldOf(addr.Type().(*types.Pointer).Elem(), ref.Field)
				for _, use := range *ref.Referrers() {
					switch use := use.(type) {
					case *ssa.UnOp, *ssa.DebugRef:
					case *ssa.Store:
						if use.Addr != ref {
							return nil, false
						}
						switch {
						case field == "Key" && (k == kOp || k == kItem):
							wrote = true
							if !add(use.Val, kKey) {
								return nil, false
							}
						case field == "Item" && k == kOp:
							wrote = true
							if !add(use.Val, kItem) {
								return nil, false
							}
						}
					default:
						return nil, false
					}
				}
			case *ssa.MakeClosure:
				if !t.onlyLoaded(ref, addr) {
					return nil, false
				}
			default:
				return nil, false
			}
		}
		return out, wrote
	}
	return nil, false
}

// array traces the operations stored in an array (Transact's variadic
// operations).
func (t *tracer) array(addr ssa.Value) ([]prefix, bool) {
	alloc, ok := addr.(*ssa.Alloc)
	if !ok {
		return nil, false
	}
	var out []prefix
	for _, ref := range *alloc.Referrers() {
		switch ref := ref.(type) {
		case *ssa.Slice, *ssa.DebugRef:
		case *ssa.IndexAddr:
			for _, use := range *ref.Referrers() {
				st, ok := use.(*ssa.Store)
				if !ok || st.Addr != ref {
					return nil, false
				}
				ps, ok := t.trace(st.Val, kOp)
				if !ok {
					return nil, false
				}
				out = append(out, ps...)
			}
		default:
			return nil, false
		}
	}
	return out, true
}

// freeVar traces a closure's captured variable to what each making of the
// closure binds.
func (t *tracer) freeVar(fv *ssa.FreeVar, trace func(ssa.Value) ([]prefix, bool)) ([]prefix, bool) {
	fn := fv.Parent()
	i := -1
	for j, w := range fn.FreeVars {
		if w == fv {
			i = j
		}
	}
	parent := fn.Parent()
	if parent == nil {
		return nil, false
	}
	var out []prefix
	made := false
	for _, b := range parent.Blocks {
		for _, in := range b.Instrs {
			mc, ok := in.(*ssa.MakeClosure)
			if !ok || mc.Fn != fn {
				continue
			}
			made = true
			ps, ok := trace(mc.Bindings[i])
			if !ok {
				return nil, false
			}
			out = append(out, ps...)
		}
	}
	return out, made
}

// onlyLoaded reports whether the closure mc makes only loads the variable
// addr it captures.
func (t *tracer) onlyLoaded(mc *ssa.MakeClosure, addr ssa.Value) bool {
	fn := mc.Fn.(*ssa.Function)
	for i, b := range mc.Bindings {
		if b != addr {
			continue
		}
		for _, ref := range *fn.FreeVars[i].Referrers() {
			if u, ok := ref.(*ssa.UnOp); !ok || u.Op != token.MUL {
				if _, ok := ref.(*ssa.DebugRef); !ok {
					return false
				}
			}
		}
	}
	return true
}

func fieldOf(t types.Type, i int) string {
	s, ok := t.Underlying().(*types.Struct)
	if !ok {
		return ""
	}
	return s.Field(i).Name()
}
