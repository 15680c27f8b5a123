package partitions

import (
	"fmt"
	"go/token"
	"go/types"
	"slices"
	"strings"

	"golang.org/x/tools/go/callgraph"
	"golang.org/x/tools/go/ssa"
	"golang.org/x/tools/go/types/typeutil"
)

// What a traced value is.
type kind int

const (
	kKey   kind = iota // store.Key
	kItem              // store.Item: its Key
	kOp                // store.Op: its Key, or its Item's
	kOps               // []store.Op
	kItems             // []store.Item
	kPage              // store.Page: the items a query found

	elems kind = 100 // plus a kind: a slice's elements of that kind, as stored
)

// writes traces the key of every store.Store write the call graph reaches
// (Transact, Update) back to the keys builders that make it (see the
// package's comment). When some write's key cannot be traced, it returns
// where that write is, and why, instead.
func (a *analysis) writes(g *callgraph.Graph, reach map[*ssa.Function]bool, runtime *typeutil.Map) (prefixes []prefix, untraced string) {
	t := &tracer{a: a, g: g, reach: reach, runtime: runtime, seen: map[traced]bool{}}
	for fn := range reach {
		for _, e := range g.Nodes[fn].Out {
			if e.Site == nil || !a.isStoreWrite(e.Callee.Func) {
				continue
			}
			k := kOp
			if e.Callee.Func.Name() == "Transact" {
				k = kOps
			}
			// (receiver, ctx, the operation or operations)
			ps, ok := t.trace(argsOf(e.Site.Common())[2], k)
			if !ok {
				return nil, fmt.Sprintf("%s in %s: %s", a.position(e.Site.Pos()), fn, strings.Join(t.why, "; "))
			}
			if k == kOp {
				ps = as(ps, "dynamodb:UpdateItem") // Update applies an OpUpdate alone
			}
			prefixes = append(prefixes, ps...)
		}
	}
	return prefixes, ""
}

// isStoreWrite reports whether fn is the Transact or Update method of a
// store.Store.
func (a *analysis) isStoreWrite(fn *ssa.Function) bool {
	return a.isStoreMethod(fn, "Transact") || a.isStoreMethod(fn, "Update")
}

// isStoreMethod reports whether fn is the method name of a store.Store.
func (a *analysis) isStoreMethod(fn *ssa.Function, name string) bool {
	recv := fn.Signature.Recv()
	return recv != nil && fn.Name() == name && types.Implements(recv.Type(), a.storeType)
}

type tracer struct {
	a     *analysis
	g     *callgraph.Graph
	reach map[*ssa.Function]bool
	seen  map[traced]bool
	// runtime are the types reflection may reach (RTA's runtime types).
	runtime *typeutil.Map
	why     []string // why the trace failed
}

// no fails a trace, saying why.
func (t *tracer) no(format string, args ...any) ([]prefix, bool) {
	t.why = append(t.why, fmt.Sprintf(format, args...))
	return nil, false
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
	if elem, ok := elementKind(k); ok {
		// What is stored in the slice's elements, as well as what it holds
		// when made.
		stored, ok := t.elements(v, elem)
		if !ok {
			return nil, false
		}
		made, ok := t.made(v, k)
		return append(stored, made...), ok
	}
	return t.made(v, k)
}

func (k kind) String() string {
	switch k {
	case kKey:
		return "a key"
	case kItem:
		return "an item"
	case kOp:
		return "an operation"
	case kOps:
		return "operations"
	case kItems:
		return "items"
	case kPage:
		return "a page"
	}
	return "elements"
}

// elementKind is the kind of the elements of a slice of kind k.
func elementKind(k kind) (kind, bool) {
	switch k {
	case kOps:
		return kOp, true
	case kItems:
		return kItem, true
	}
	return 0, false
}

// made traces what v holds when it is made (for a slice: its elements then).
func (t *tracer) made(v ssa.Value, k kind) ([]prefix, bool) {
	switch v := v.(type) {
	case *ssa.Phi:
		return t.each(v.Edges, k)
	case *ssa.Parameter:
		return t.parameter(v, k)
	case *ssa.UnOp:
		if v.Op == token.MUL {
			return t.load(v.X, k)
		}
	case *ssa.Field:
		if whole, ok := container(v.X.Type(), v.Field, k); ok {
			return t.trace(v.X, whole)
		}
		return t.field(v.X.Type(), v.Field, k)
	case *ssa.Call:
		return t.call(v, k, 0)
	case *ssa.Extract:
		if c, ok := v.Tuple.(*ssa.Call); ok {
			return t.call(c, k, v.Index)
		}
	case *ssa.Slice:
		if elem, ok := elementKind(k); ok {
			if _, ok := v.X.(*ssa.Alloc); ok {
				return t.elements(v.X, elem) // an array: the variadic operations
			}
			return t.trace(v.X, k)
		}
	case *ssa.MakeSlice:
		if _, ok := elementKind(k); ok {
			return nil, true // its elements are traced where they are stored
		}
	case *ssa.Const:
		if v.Value == nil {
			return nil, true // a zero key is no key: the store refuses it
		}
	}
	return t.no("%s %v (%T) in %s", k, v, v, v.Parent())
}

func (t *tracer) each(vs []ssa.Value, k kind) ([]prefix, bool) {
	var out []prefix
	for _, v := range vs {
		ps, ok := t.trace(v, k)
		if !ok {
			return nil, false
		}
		out = append(out, ps...)
	}
	return out, true
}

// opActions are the actions of the operations store's functions make.
var opActions = map[string]string{
	"Put":       "dynamodb:PutItem",
	"Increment": "dynamodb:UpdateItem",
	"Delete":    "dynamodb:DeleteItem",
	"Check":     "dynamodb:ConditionCheckItem",
}

// as gives ps the action of the operation that names them.
func as(ps []prefix, action string) []prefix {
	out := make([]prefix, len(ps))
	for i, p := range ps {
		p.action = action
		out[i] = p
	}
	return out
}

// opKinds are the actions an operation, a composite literal at addr, may
// be: by the constants stored in its Kind ("" for any when one is not a
// constant).
func opKinds(addr ssa.Value) []string {
	byKind := map[int64]string{1: "dynamodb:PutItem", 2: "dynamodb:UpdateItem", 3: "dynamodb:DeleteItem", 4: "dynamodb:ConditionCheckItem"}
	var out []string
	for _, ref := range *addr.Referrers() {
		fa, ok := ref.(*ssa.FieldAddr)
		if !ok || fieldOf(addr.Type().Underlying().(*types.Pointer).Elem(), fa.Field) != "Kind" {
			continue
		}
		for _, use := range *fa.Referrers() {
			switch use := use.(type) {
			case *ssa.UnOp, *ssa.DebugRef:
			case *ssa.Store:
				c, isConst := use.Val.(*ssa.Const)
				if !isConst || c.Value == nil || byKind[c.Int64()] == "" {
					return []string{""}
				}
				out = append(out, byKind[c.Int64()])
			default:
				return []string{""}
			}
		}
	}
	if len(out) == 0 {
		return []string{""} // a Kind set elsewhere, or none (which the store refuses)
	}
	return out
}

// container is the kind of a value of type typ whose field holds what
// kind k traces: an item (or an operation) for its Key, an operation for
// its Item.
func container(typ types.Type, field int, k kind) (kind, bool) {
	if p, ok := typ.Underlying().(*types.Pointer); ok {
		typ = p.Elem()
	}
	name := fieldOf(typ, field)
	switch {
	case k == kKey && name == "Key" && isNamed(typ, storePath, "Item"):
		return kItem, true
	case (k == kKey && name == "Key" || k == kItem && name == "Item") && isNamed(typ, storePath, "Op"):
		return kOp, true
	case k == kItems && name == "Items" && isNamed(typ, storePath, "Page"):
		return kPage, true
	}
	return 0, false
}

// holder is the kind of what a field of a value of type typ, of kind k,
// holds when it makes the value's key: an operation's Key and Item, an
// item's Key.
func holder(typ types.Type, field int, k kind) (kind, bool) {
	if p, ok := typ.Underlying().(*types.Pointer); ok {
		typ = p.Elem()
	}
	switch name := fieldOf(typ, field); {
	case name == "Key" && (k == kOp && isNamed(typ, storePath, "Op") || k == kItem && isNamed(typ, storePath, "Item")):
		return kKey, true
	case name == "Item" && k == kOp && isNamed(typ, storePath, "Op"):
		return kItem, true
	case name == "Items" && k == kPage && isNamed(typ, storePath, "Page"):
		return kItems, true
	}
	return 0, false
}

// call traces the result (the index'th) of a call: a keys builder's (a
// key), store.Put's, Delete's, Increment's or Check's (an operation on the
// key, or the item, it is given), append's (a slice of operations), or
// what the functions the call graph says it calls return.
func (t *tracer) call(c *ssa.Call, k kind, index int) ([]prefix, bool) {
	if b, ok := c.Call.Value.(*ssa.Builtin); ok && b.Name() == "append" && k == kOps {
		return t.each(c.Call.Args, kOps)
	}
	if callee := c.Call.StaticCallee(); callee != nil && callee.Pkg != nil {
		switch callee.Pkg.Pkg.Path() {
		case keysPath:
			if ps := t.a.syntax.builders[callee.Object()]; k == kKey && ps != nil {
				return ps, true
			}
			return t.no("keys.%s made %s", callee.Name(), k)
		case storePath:
			if action, ok := opActions[callee.Name()]; ok && k == kOp {
				arg := kKey
				if callee.Name() == "Put" {
					arg = kItem
				}
				ps, ok := t.trace(c.Call.Args[0], arg)
				return as(ps, action), ok
			}
		}
	}
	var out []prefix
	called := false
	for _, e := range t.g.Nodes[c.Parent()].Out {
		if e.Site != c {
			continue
		}
		called = true
		if k == kItem && index == 0 && t.a.isStoreMethod(e.Callee.Func, "Get") {
			// Get returns the item at the key it is given.
			ps, ok := t.trace(c.Call.Args[len(c.Call.Args)-1], kKey)
			if !ok {
				return nil, false
			}
			out = append(out, ps...)
			continue
		}
		if k == kPage && index == 0 && t.a.isStoreMethod(e.Callee.Func, "Query") {
			ps, ok := t.query(c)
			if !ok {
				return nil, false
			}
			out = append(out, ps...)
			continue
		}
		if len(e.Callee.Func.Blocks) == 0 {
			return t.no("%s has no body", e.Callee.Func)
		}
		for _, b := range e.Callee.Func.Blocks {
			if ret, ok := b.Instrs[len(b.Instrs)-1].(*ssa.Return); ok {
				ps, ok := t.trace(ret.Results[index], k)
				if !ok {
					return nil, false
				}
				out = append(out, ps...)
			}
		}
	}
	if !called {
		return t.no("%s %v in %s, which calls nothing known", k, c, c.Parent())
	}
	return out, true
}

// parameter traces a parameter to what every call of its function in the
// call graph passes.
func (t *tracer) parameter(p *ssa.Parameter, k kind) ([]prefix, bool) {
	fn := p.Parent()
	i := slices.Index(fn.Params, p)
	n := t.g.Nodes[fn]
	if n == nil || len(n.In) == 0 {
		return t.no("no callers of %s", fn)
	}
	var out []prefix
	for _, e := range n.In {
		if !t.reach[e.Caller.Func] {
			continue
		}
		if e.Site == nil {
			return t.no("reflective call of %s from %s", fn, e.Caller.Func)
		}
		args := argsOf(e.Site.Common())
		if len(args) != len(fn.Params) {
			return t.no("arity %s from %s", fn, e.Caller.Func)
		}
		ps, ok := t.trace(args[i], k)
		if !ok {
			return nil, false
		}
		out = append(out, ps...)
	}
	return out, true
}

// load traces what is loaded from addr: a variable (or composite literal)
// whose every use is a load, or a store of it or of one of its fields, or
// its capture by a closure that does the same; a field of such that holds
// a key.
func (t *tracer) load(addr ssa.Value, k kind) ([]prefix, bool) {
	switch addr := addr.(type) {
	case *ssa.FreeVar:
		return t.freeVar(addr, func(v ssa.Value) ([]prefix, bool) { return t.load(v, k) })
	case *ssa.FieldAddr:
		if whole, ok := container(addr.X.Type(), addr.Field, k); ok {
			return t.load(addr.X, whole)
		}
		return t.field(addr.X.Type(), addr.Field, k)
	case *ssa.IndexAddr:
		if k == kOp {
			return t.trace(addr.X, kOps)
		}
		if k == kItem {
			return t.trace(addr.X, kItems)
		}
	case *ssa.Alloc:
		return t.stores(addr, k)
	}
	return t.no("%s loaded from %v (%T) in %s", k, addr, addr, addr.Parent())
}

// stores traces what is stored at addr, of kind k, and in the fields that
// hold its key. A variable must be written (its zero value is no key); an
// element of a slice may only be read.
func (t *tracer) stores(addr ssa.Value, k kind) ([]prefix, bool) {
	var out []prefix
	wrote := false
	for _, ref := range *addr.Referrers() {
		switch ref := ref.(type) {
		case *ssa.UnOp, *ssa.DebugRef:
		case *ssa.Store:
			if ref.Addr != addr {
				return t.no("%v stored in %s", addr, ref.Parent())
			}
			ps, ok := t.trace(ref.Val, k)
			if !ok {
				return nil, false
			}
			out, wrote = append(out, ps...), true
		case *ssa.FieldAddr:
			part, holds := holder(addr.Type(), ref.Field, k)
			if !holds && k == kKey && fieldOf(addr.Type().Underlying().(*types.Pointer).Elem(), ref.Field) == "PK" && !onlyLoaded(ref) {
				return t.no("a key's PK set in %s", addr.Parent())
			}
			if !holds {
				continue // another field: its stores change no partition key
			}
			ps, ok := t.stores(ref, part)
			if !ok {
				return nil, false
			}
			if k == kOp {
				var acted []prefix
				for _, a := range opKinds(addr) {
					acted = append(acted, as(ps, a)...)
				}
				ps = acted
			}
			out = append(out, ps...)
			wrote = wrote || len(*ref.Referrers()) > 0
		case *ssa.MakeClosure:
			ps, ok := t.captured(ref, addr, k)
			if !ok {
				return nil, false
			}
			out = append(out, ps...)
		case *ssa.Call:
			// What the callees store at the address.
			ps, ok := t.intoCallees(addr, ref, func(p ssa.Value) ([]prefix, bool) { return t.stores(p, k) })
			if !ok {
				return nil, false
			}
			out = append(out, ps...)
		default:
			return t.no("referrer %T %v of %v in %s", ref, ref, addr, addr.Parent())
		}
	}
	if _, variable := addr.(*ssa.Alloc); variable && !wrote {
		return t.no("%v never written in %s", addr, addr.Parent())
	}
	return out, true
}

// intoCallees follows v, which the call c passes, into the parameters
// that take it in each function the call graph says c calls.
func (t *tracer) intoCallees(v ssa.Value, c *ssa.Call, follow func(ssa.Value) ([]prefix, bool)) ([]prefix, bool) {
	var out []prefix
	called := false
	for _, e := range t.g.Nodes[c.Parent()].Out {
		if e.Site != c {
			continue
		}
		called = true
		fn := e.Callee.Func
		args := argsOf(c.Common())
		if len(args) != len(fn.Params) {
			return t.no("%v passed to %s, whose parameters differ", v, fn)
		}
		for i, a := range args {
			if a != v {
				continue
			}
			ps, ok := follow(fn.Params[i])
			if !ok {
				return nil, false
			}
			out = append(out, ps...)
		}
	}
	if !called {
		return t.no("%v passed to %v, which calls nothing known", v, c)
	}
	return out, true
}

// argsOf is what a call passes to its callee's parameters: the receiver
// first, for a call of an interface's method.
func argsOf(c *ssa.CallCommon) []ssa.Value {
	if c.IsInvoke() {
		return append([]ssa.Value{c.Value}, c.Args...)
	}
	return c.Args
}

// captured traces what the closure mc stores in the variable addr it
// captures.
func (t *tracer) captured(mc *ssa.MakeClosure, addr ssa.Value, k kind) ([]prefix, bool) {
	fn := mc.Fn.(*ssa.Function)
	var out []prefix
	for i, b := range mc.Bindings {
		if b != addr {
			continue
		}
		for _, ref := range *fn.FreeVars[i].Referrers() {
			switch ref := ref.(type) {
			case *ssa.UnOp, *ssa.DebugRef:
			case *ssa.Store:
				ps, ok := t.trace(ref.Val, k)
				if !ok {
					return nil, false
				}
				out = append(out, ps...)
			default:
				return t.no("captured %v used as %T in %s", addr, ref, fn)
			}
		}
	}
	return out, true
}

// elements traces the operations stored in the elements of a slice, or an
// array, v: through its elements' addresses, the slices append makes of it
// (which may share its array), the variables it is stored in and the
// parameters it is passed as.
func (t *tracer) elements(v ssa.Value, elem kind) ([]prefix, bool) {
	if t.seen[traced{v, elems + elem}] {
		return nil, true
	}
	t.seen[traced{v, elems + elem}] = true
	refs := v.Referrers()
	if refs == nil {
		return nil, true
	}
	var out []prefix
	for _, ref := range *refs {
		var ps []prefix
		ok := true
		switch ref := ref.(type) {
		case *ssa.DebugRef:
		case *ssa.IndexAddr:
			ps, ok = t.stores(ref, elem)
		case *ssa.Slice, *ssa.Phi:
			ps, ok = t.elements(ref.(ssa.Value), elem)
		case *ssa.Store:
			ps, ok = t.aliases(ref.Addr, elem)
		case *ssa.Call:
			ps, ok = t.passed(v, ref, elem)
		case *ssa.Return:
			ps, ok = t.returned(v, ref, elem)
		default:
			return t.no("slice %v used as %T %v in %s", v, ref, ref, v.Parent())
		}
		if !ok {
			return nil, false
		}
		out = append(out, ps...)
	}
	return out, true
}

// aliases traces the elements of the slices loaded from the variable addr
// (directly, or by the closures that capture it).
func (t *tracer) aliases(addr ssa.Value, elem kind) ([]prefix, bool) {
	if _, ok := addr.(*ssa.Alloc); !ok {
		return t.no("slice stored in %v", addr)
	}
	var out []prefix
	for _, ref := range *addr.Referrers() {
		var loads []ssa.Value
		switch ref := ref.(type) {
		case *ssa.UnOp:
			loads = append(loads, ref)
		case *ssa.MakeClosure:
			fn := ref.Fn.(*ssa.Function)
			for i, b := range ref.Bindings {
				if b != addr {
					continue
				}
				for _, use := range *fn.FreeVars[i].Referrers() {
					if u, ok := use.(*ssa.UnOp); ok {
						loads = append(loads, u)
					}
				}
			}
		}
		for _, l := range loads {
			ps, ok := t.elements(l, elem)
			if !ok {
				return nil, false
			}
			out = append(out, ps...)
		}
	}
	return out, true
}

// returned traces the elements of the slice v as the callers of the
// function that returns it may store them.
func (t *tracer) returned(v ssa.Value, ret *ssa.Return, elem kind) ([]prefix, bool) {
	fn := ret.Parent()
	var out []prefix
	for i, r := range ret.Results {
		if r != v {
			continue
		}
		for _, e := range t.g.Nodes[fn].In {
			if !t.reach[e.Caller.Func] {
				continue
			}
			c, ok := e.Site.(*ssa.Call)
			if !ok {
				return t.no("slice %v returned by %s to %v", v, fn, e.Site)
			}
			results := []ssa.Value{c}
			if len(ret.Results) > 1 {
				results = nil
				for _, ref := range *c.Referrers() {
					if x, ok := ref.(*ssa.Extract); ok && x.Index == i {
						results = append(results, x)
					}
				}
			}
			for _, r := range results {
				ps, ok := t.elements(r, elem)
				if !ok {
					return nil, false
				}
				out = append(out, ps...)
			}
		}
	}
	return out, true
}

// passed traces the elements of the slice v as the functions that call c
// passes it to may store them; append and len only read what they are
// given (append's result is traced apart, as v's alias).
func (t *tracer) passed(v ssa.Value, c *ssa.Call, elem kind) ([]prefix, bool) {
	if b, ok := c.Call.Value.(*ssa.Builtin); ok {
		switch {
		case b.Name() == "append" && c.Call.Args[0] == v:
			return t.elements(c, elem)
		case b.Name() == "append", b.Name() == "len", b.Name() == "cap":
			return nil, true
		}
		return t.no("slice %v passed to %v", v, c)
	}
	return t.intoCallees(v, c, func(p ssa.Value) ([]prefix, bool) { return t.elements(p, elem) })
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
		return t.no("free variable %v of %s, no parent", fv, fn)
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
	if !made {
		return t.no("free variable %v of %s, never made", fv, fn)
	}
	return out, true
}

// onlyLoaded reports whether the address addr is only read.
func onlyLoaded(addr ssa.Value) bool {
	for _, ref := range *addr.Referrers() {
		switch ref := ref.(type) {
		case *ssa.DebugRef:
		case *ssa.UnOp:
			if ref.Op != token.MUL {
				return false
			}
		default:
			return false
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
