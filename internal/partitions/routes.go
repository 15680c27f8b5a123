package partitions

import (
	"errors"
	"fmt"
	"go/constant"
	"go/types"
	"slices"

	"golang.org/x/tools/go/ssa"
	"golang.org/x/tools/go/ssa/ssautil"
)

// routeTable is httpapi's (*API).routes in SSA form: each route's group and
// the instruction that stores its handler.
type routeTable struct {
	fn      *ssa.Function
	handles []handle
}

type handle struct {
	group string
	store *ssa.Store // *(&route.handle) = the handler
}

func newRouteTable(prog *ssa.Program) (*routeTable, error) {
	hp := prog.ImportedPackage(httpapiPath)
	if hp == nil {
		return nil, errors.New("partitions: the functions do not link internal/httpapi")
	}
	api := types.NewPointer(hp.Members["API"].(*ssa.Type).Type())
	sel := prog.MethodSets.MethodSet(api).Lookup(hp.Pkg, "routes")
	if sel == nil {
		return nil, errors.New("partitions: httpapi.API has no routes method")
	}
	t := &routeTable{fn: prog.MethodValue(sel)}
	groups := map[ssa.Value]string{} // by the route's address
	for _, b := range t.fn.Blocks {
		for _, in := range b.Instrs {
			st, ok := in.(*ssa.Store)
			if !ok {
				continue
			}
			fa, ok := st.Addr.(*ssa.FieldAddr)
			if !ok {
				continue
			}
			switch fieldName(fa) {
			case "group":
				c, ok := st.Val.(*ssa.Const)
				if !ok {
					return nil, fmt.Errorf("partitions: a route of httpapi whose group is not a constant (%s)", prog.Fset.Position(st.Pos()))
				}
				groups[fa.X] = constant.StringVal(c.Value)
			case "handle":
				t.handles = append(t.handles, handle{store: st})
			}
		}
	}
	for i, h := range t.handles {
		g, ok := groups[h.store.Addr.(*ssa.FieldAddr).X]
		if !ok {
			return nil, fmt.Errorf("partitions: a route of httpapi without a group (%s)", prog.Fset.Position(h.store.Pos()))
		}
		t.handles[i].group = g
	}
	if len(t.handles) == 0 {
		return nil, errors.New("partitions: httpapi's routes make no handlers")
	}
	if err := t.check(prog); err != nil {
		return nil, err
	}
	return t, nil
}

// check holds the two facts the cut rests on: outside routes(), a route's
// handler is read in (*API).Handler alone (which mounts those of the groups
// it serves), and making a handler calls nothing but functions that make
// closures without calling anything themselves (listed, byID, …).
func (t *routeTable) check(prog *ssa.Program) error {
	route := t.handles[0].store.Addr.(*ssa.FieldAddr).X.Type().(*types.Pointer).Elem()
	for fn := range allFunctions(prog) {
		if fn == t.fn {
			continue
		}
		for _, b := range fn.Blocks {
			for _, in := range b.Instrs {
				var x ssa.Value
				var field int
				switch in := in.(type) {
				case *ssa.FieldAddr:
					x, field = in, in.Field
					if !types.Identical(in.X.Type().(*types.Pointer).Elem(), route) {
						continue
					}
				case *ssa.Field:
					x, field = in, in.Field
					if !types.Identical(in.X.Type(), route) {
						continue
					}
				default:
					continue
				}
				if route.Underlying().(*types.Struct).Field(field).Name() == "handle" && fn.String() != "(*"+httpapiPath+".API).Handler" {
					return fmt.Errorf("partitions: %s reads a route's handler (%s); the analysis assumes only (*API).Handler does", fn, prog.Fset.Position(x.Pos()))
				}
			}
		}
	}
	for _, h := range t.handles {
		for in := range t.slice(h) {
			call, ok := in.(*ssa.Call)
			if !ok {
				continue
			}
			callee := call.Call.StaticCallee()
			if callee == nil || !makesClosuresOnly(callee) {
				return fmt.Errorf("partitions: making the handler of a %s route calls %s, which does more than make a closure", h.group, call.Call.Value)
			}
		}
	}
	return nil
}

// makesClosuresOnly reports whether fn calls nothing (its closures may).
func makesClosuresOnly(fn *ssa.Function) bool {
	for _, b := range fn.Blocks {
		for _, in := range b.Instrs {
			if _, ok := in.(ssa.CallInstruction); ok {
				return false
			}
		}
	}
	return len(fn.Blocks) > 0
}

// slice is the instructions of routes() that make h's handler and nothing
// else.
func (t *routeTable) slice(h handle) map[ssa.Instruction]bool {
	out := map[ssa.Instruction]bool{}
	var walk func(v ssa.Value)
	walk = func(v ssa.Value) {
		in, ok := v.(ssa.Instruction)
		if !ok || in.Parent() != t.fn || out[in] {
			return
		}
		out[in] = true
		for _, op := range in.Operands(nil) {
			if *op != nil {
				walk(*op)
			}
		}
	}
	walk(h.store.Val)
	return out
}

// cut takes out of routes() the making of the handlers of the groups that
// serve does not accept, as Handler never mounts them, and returns what
// puts them back. Instructions that a kept one uses stay.
func (t *routeTable) cut(serve func(group string) bool) (restore func(), err error) {
	gone := map[ssa.Instruction]bool{}
	for _, h := range t.handles {
		if !serve(h.group) {
			gone[h.store] = true
			for in := range t.slice(h) {
				gone[in] = true
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, b := range t.fn.Blocks {
			for _, in := range b.Instrs {
				if gone[in] {
					continue
				}
				for _, op := range in.Operands(nil) {
					if used, ok := (*op).(ssa.Instruction); ok && gone[used] {
						delete(gone, used)
						changed = true
					}
				}
			}
		}
	}
	saved := make([][]ssa.Instruction, len(t.fn.Blocks))
	for i, b := range t.fn.Blocks {
		saved[i] = b.Instrs
		b.Instrs = slices.DeleteFunc(slices.Clone(b.Instrs), func(in ssa.Instruction) bool { return gone[in] })
	}
	return func() {
		for i, b := range t.fn.Blocks {
			b.Instrs = saved[i]
		}
	}, nil
}

func fieldName(fa *ssa.FieldAddr) string {
	return fa.X.Type().(*types.Pointer).Elem().Underlying().(*types.Struct).Field(fa.Field).Name()
}

// allFunctions is every function of prog with a body, anonymous ones
// included.
func allFunctions(prog *ssa.Program) map[*ssa.Function]bool {
	out := map[*ssa.Function]bool{}
	var add func(fn *ssa.Function)
	add = func(fn *ssa.Function) {
		if out[fn] {
			return
		}
		out[fn] = true
		for _, anon := range fn.AnonFuncs {
			add(anon)
		}
	}
	for fn := range ssautil.AllFunctions(prog) {
		add(fn)
	}
	return out
}
