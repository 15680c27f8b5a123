package partitions

import (
	"go/constant"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/ssa"
)

// What the trace knows of keys that are read back: the items a query
// finds, and the keys kept in other structs' fields.

// field traces what a struct's field (of type typ's field index) that is
// neither an item's nor an operation's holds: every value stored in that
// field anywhere the call graph reaches. Reflection could set it too
// (encoding/json) when it is exported and the struct is a runtime type;
// then it is not traced.
func (t *tracer) field(typ types.Type, index int, k kind) ([]prefix, bool) {
	if p, ok := typ.Underlying().(*types.Pointer); ok {
		typ = p.Elem()
	}
	st, ok := typ.Underlying().(*types.Struct)
	if _, slice := elementKind(k); !ok || slice {
		// A slice loaded from a field may share its array with another
		// load of it that stores in its elements.
		return t.no("%s in field %d of %s", k, index, typ)
	}
	if st.Field(index).Exported() && (t.runtime.At(typ) != nil || t.runtime.At(types.NewPointer(typ)) != nil) {
		return t.no("field %s of %s, which reflection may set", st.Field(index).Name(), typ)
	}
	var out []prefix
	for fn := range t.reach {
		for _, b := range fn.Blocks {
			for _, in := range b.Instrs {
				switch in := in.(type) {
				case *ssa.ChangeType, *ssa.Convert:
					if types.Identical(in.(ssa.Value).Type(), typ) {
						return t.no("%s made by conversion in %s", typ, fn)
					}
				}
				fa, ok := in.(*ssa.FieldAddr)
				if !ok || fa.Field != index || !types.Identical(fa.X.Type().Underlying().(*types.Pointer).Elem(), typ) {
					continue
				}
				ps, ok := t.stores(fa, k)
				if !ok {
					return nil, false
				}
				out = append(out, ps...)
			}
		}
	}
	return out, true
}

// query gives the table partitions of the items a store.Store Query call
// finds: those of its partition key's builders for the table, those of the
// items in the index partitions they build for an index.
func (t *tracer) query(c *ssa.Call) ([]prefix, bool) {
	if at := t.itemKeyStore(); at != "" {
		return t.no("the key of a found item may be changed: %s", at)
	}
	q := c.Call.Args[len(c.Call.Args)-1]
	var parts queryParts
	if !t.queryParts(q, &parts, map[ssa.Value]bool{}) {
		return t.no("query %v in %s", c, c.Parent())
	}
	var out []prefix
	for _, src := range parts.pks {
		if parts.table {
			out = append(out, t.a.syntax.builders[src]...)
		}
		if parts.index {
			if t.a.syntax.indexed[src] == nil {
				return t.no("query of an index by %s, whose items the analysis does not know", src.Name())
			}
			out = append(out, t.a.syntax.indexed[src]...)
		}
	}
	return out, true
}

// itemKeyStore finds a store, anywhere the call graph reaches, in an
// element of a []store.Item (the items a query found) that may change the
// element's key: the whole item, its Key, or its Key's PK. It returns where
// the first is, "" when there is none.
func (t *tracer) itemKeyStore() string {
	isItems := func(v ssa.Value) bool {
		s, ok := v.Type().Underlying().(*types.Slice)
		return ok && isNamed(s.Elem(), storePath, "Item")
	}
	for fn := range t.reach {
		for _, b := range fn.Blocks {
			for _, in := range b.Instrs {
				st, ok := in.(*ssa.Store)
				if !ok {
					continue
				}
				addr := st.Addr
				for {
					if fa, ok := addr.(*ssa.FieldAddr); ok && (fieldOf(fa.X.Type().Underlying().(*types.Pointer).Elem(), fa.Field) == "Key" ||
						fieldOf(fa.X.Type().Underlying().(*types.Pointer).Elem(), fa.Field) == "PK") {
						addr = fa.X
						continue
					}
					break
				}
				if ia, ok := addr.(*ssa.IndexAddr); ok && isItems(ia.X) {
					return t.a.position(st.Pos()) + " in " + fn.String()
				}
			}
		}
	}
	return ""
}

// queryParts are what a store.Query names: the keys builders of its
// partition key, and whether it reads the table, an index, or both.
type queryParts struct {
	pks          []types.Object
	table, index bool
}

// queryParts traces a store.Query value: a composite literal (whose PK is
// a keys builder's call, and whose Index is a constant), or a parameter
// or phi of such.
func (t *tracer) queryParts(v ssa.Value, parts *queryParts, seen map[ssa.Value]bool) bool {
	if seen[v] {
		return true
	}
	seen[v] = true
	switch v := v.(type) {
	case *ssa.Phi:
		for _, e := range v.Edges {
			if !t.queryParts(e, parts, seen) {
				return false
			}
		}
		return true
	case *ssa.UnOp:
		alloc, ok := v.X.(*ssa.Alloc)
		if !ok || v.Op != token.MUL {
			return false
		}
		indexSet := false
		for _, ref := range *alloc.Referrers() {
			switch ref := ref.(type) {
			case *ssa.UnOp, *ssa.DebugRef:
			case *ssa.Store:
				if !t.queryParts(ref.Val, parts, seen) {
					return false
				}
				indexSet = true // as the stored query's
			case *ssa.FieldAddr:
				name := fieldOf(alloc.Type().(*types.Pointer).Elem(), ref.Field)
				for _, use := range *ref.Referrers() {
					st, ok := use.(*ssa.Store)
					switch {
					case !ok:
						if _, load := use.(*ssa.UnOp); !load && (name == "PK" || name == "Index") {
							return false
						}
					case name == "PK":
						src := t.builderCall(st.Val)
						if src == nil {
							return false
						}
						parts.pks = append(parts.pks, src)
					case name == "Index":
						indexSet = true
						c, ok := st.Val.(*ssa.Const)
						if !ok {
							parts.table, parts.index = true, true
						} else if constant.StringVal(c.Value) == "" {
							parts.table = true
						} else {
							parts.index = true
						}
					}
				}
			default:
				return false
			}
		}
		if !indexSet {
			parts.table = true
		}
		return true
	}
	return false
}

// builderCall is the keys builder whose call v is.
func (t *tracer) builderCall(v ssa.Value) types.Object {
	c, ok := v.(*ssa.Call)
	if !ok {
		return nil
	}
	callee := c.Call.StaticCallee()
	if callee == nil || callee.Pkg == nil || callee.Pkg.Pkg.Path() != keysPath || t.a.syntax.builders[callee.Object()] == nil {
		return nil
	}
	return callee.Object()
}
