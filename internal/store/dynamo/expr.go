package dynamo

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tally-hq/tally/internal/store"
)

// exprBuilder collects the placeholders of one request's expressions. Every
// attribute name goes through a placeholder, so names that are DynamoDB
// reserved words (data, ttl, count, ...) need no special care. The maps stay
// nil until used because DynamoDB rejects empty ones.
type exprBuilder struct {
	names  map[string]string
	values map[string]types.AttributeValue
	byName map[string]string
}

func (e *exprBuilder) name(attr string) string {
	if p, ok := e.byName[attr]; ok {
		return p
	}
	if e.names == nil {
		e.names = make(map[string]string)
		e.byName = make(map[string]string)
	}
	p := "#n" + strconv.Itoa(len(e.names))
	e.names[p] = attr
	e.byName[attr] = p
	return p
}

func (e *exprBuilder) value(v types.AttributeValue) string {
	if e.values == nil {
		e.values = make(map[string]types.AttributeValue)
	}
	p := ":v" + strconv.Itoa(len(e.values))
	e.values[p] = v
	return p
}

// conds returns the condition expression that holds when all conds hold, or
// nil when there are none.
func (e *exprBuilder) conds(conds []store.Cond) *string {
	if len(conds) == 0 {
		return nil
	}
	parts := make([]string, len(conds))
	for i, c := range conds {
		parts[i] = e.cond(c)
	}
	return aws.String(strings.Join(parts, " AND "))
}

func (e *exprBuilder) cond(c store.Cond) string {
	switch c.Kind {
	case store.CondExists:
		return "attribute_exists(" + e.name(attrPK) + ")"
	case store.CondNotExists:
		return "attribute_not_exists(" + e.name(attrPK) + ")"
	case store.CondAttrEquals:
		return e.name(c.Attr) + " = " + e.value(str(c.S))
	case store.CondNumLess:
		a := e.name(c.Attr)
		cmp := a + " < " + e.value(num(c.N))
		if c.N > 0 { // an absent attribute counts as 0, which is less than N
			return "(attribute_not_exists(" + a + ") OR " + cmp + ")"
		}
		return cmp
	default: // store.CondNumEquals; store.ValidateOps admits nothing else.
		a := e.name(c.Attr)
		cmp := a + " = " + e.value(num(c.N))
		if c.N == 0 { // an absent attribute counts as 0
			return "(attribute_not_exists(" + a + ") OR " + cmp + ")"
		}
		return cmp
	}
}

// update returns the update expression of an OpUpdate. Names are visited in
// sorted order so that equal operations make equal requests.
func (e *exprBuilder) update(op store.Op) string {
	var set, add []string
	for _, name := range slices.Sorted(maps.Keys(op.Set)) {
		set = append(set, e.name(name)+" = "+e.value(str(op.Set[name])))
	}
	if op.ExpiresAt != 0 {
		set = append(set, e.name(attrTTL)+" = "+e.value(num(op.ExpiresAt)))
	}
	for _, name := range slices.Sorted(maps.Keys(op.Add)) {
		add = append(add, e.name(name)+" "+e.value(num(op.Add[name])))
	}
	var clauses []string
	if len(set) > 0 {
		clauses = append(clauses, "SET "+strings.Join(set, ", "))
	}
	if len(add) > 0 {
		clauses = append(clauses, "ADD "+strings.Join(add, ", "))
	}
	return strings.Join(clauses, " ")
}
