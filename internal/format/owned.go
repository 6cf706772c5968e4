package format

import "strings"

// GraftShaped reports whether key, at any depth, has the shape of a key graft
// writes for a graph (docs/format.md, *Ownership*), naming the shape:
//
//	*/graph.json
//	*/tables/*/objects/*, */tables/*/chunks/*, */tables/*/versions/*
//	*/trees/*, */refs/*, */chunks/*
//
// (leading and trailing * one or more segments, the table one). Such a key is
// never imported by reference, whether or not a graph exists there now.
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

// GraphPrefixesOf returns the prefixes "{p}/" of key, shortest first, whose
// last segment is a valid graph name: where a graph could own key.
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
