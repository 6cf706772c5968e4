package format

import "strings"

// GraftShaped reports whether key has the shape of a key graft writes for a graph
// (docs/format.md, *Ownership*), at any depth — a store shared by deployments may hold
// graphs under a prefix of its own — and names the shape it matched:
//
//	*/graph.json
//	*/tables/*/objects/*, */tables/*/chunks/*, */tables/*/versions/*
//	*/trees/*, */refs/*, */chunks/*
//
// where the leading * is one or more segments, the table one segment, and the trailing
// * one or more segments. Such a key may be graft's whether or not a graph exists at its
// prefix now, so it is never imported by reference.
func GraftShaped(key string) (string, bool) {
	segs := strings.Split(key, "/")
	n := len(segs)
	if n >= 2 && segs[n-1] == "graph.json" {
		return "*/graph.json", true
	}
	for i := 1; i < n-1; i++ {
		switch segs[i] {
		case "tables":
			if i+3 < n {
				switch segs[i+2] {
				case "objects", "chunks", "versions":
					return "*/tables/*/" + segs[i+2] + "/*", true
				}
			}
		case "trees", "refs", "chunks":
			return "*/" + segs[i] + "/*", true
		}
	}
	return "", false
}

// GraphPrefixesOf returns the prefixes of key, shortest first, at which a graph could
// own it: every "{p}/" before key's last segment whose own last segment is a valid
// graph name (a graph is "{name}/" in its store, which may itself sit under a prefix of
// a store another deployment shares).
func GraphPrefixesOf(key string) []string {
	var out []string
	for i := 0; i < len(key); i++ {
		if key[i] != '/' {
			continue
		}
		start := strings.LastIndexByte(key[:i], '/') + 1
		if ValidateGraphName(key[start:i]) == nil {
			out = append(out, key[:i+1])
		}
	}
	return out
}
