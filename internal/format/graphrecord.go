package format

import "time"

// Graph is the graph record at GraphKey, written last by init: its presence
// means the root commit and main ref exist.
type Graph struct {
	Name          string
	CreatedAt     time.Time
	Op            string // the operation that created the graph
	DefaultBranch string // logical name of the default branch, "main"
}

type graphWire struct {
	Format        int    `json:"format"`
	Kind          Kind   `json:"kind"`
	Name          string `json:"name"`
	CreatedAt     string `json:"created_at"`
	Op            string `json:"op"`
	DefaultBranch string `json:"default_branch"`
}

var graphFields = fieldSet{required: []string{"format", "kind", "name", "created_at", "op", "default_branch"}}

// Validate reports the first invalid field of g.
func (g Graph) Validate() error {
	return firstBad(KindGraph, fieldCheck{"name", "", ValidateGraphName(g.Name)}, fieldCheck{"created_at", checkTime(g.CreatedAt), nil},
		fieldCheck{"op", checkOp(g.Op), nil}, fieldCheck{"default_branch", "", ValidateBranchName(g.DefaultBranch)})
}

// EncodeGraph returns the canonical bytes of g.
func EncodeGraph(g Graph) ([]byte, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return encodeWire(KindGraph, graphWire{
		Format:        Version,
		Kind:          KindGraph,
		Name:          g.Name,
		CreatedAt:     FormatTime(g.CreatedAt),
		Op:            g.Op,
		DefaultBranch: g.DefaultBranch,
	})
}

// DecodeGraph strictly decodes a graph record.
func DecodeGraph(b []byte) (Graph, error) {
	w, err := decodeWire[graphWire](b, KindGraph, graphFields)
	if err != nil {
		return Graph{}, err
	}
	created, why := parseTime(w.CreatedAt)
	if why != "" {
		return Graph{}, malformed(KindGraph, "created_at", why)
	}
	g := Graph{Name: w.Name, CreatedAt: created, Op: w.Op, DefaultBranch: w.DefaultBranch}
	if err := g.Validate(); err != nil {
		return Graph{}, err
	}
	return g, nil
}
