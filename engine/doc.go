// Package engine stands between the commands and the model: from one
// typed Config (model, device, threads, regime, method spec, table,
// guide, prefix store) Build makes, once and with every default and every
// check, the model and its guide, the generation options, the prefix
// store and the served method; Engine.Run generates one request,
// resolving its method once.
//
// serve, generate, eval, bench, calibrate, lut verify, the sweeps and
// profile build an Engine; the commands only parse their flags into a
// Config. One caching method's own defaults stay in the method's file
// under cache/ (cache/exactblock.go says when a block-causal model is
// served by the exact block cache, and in which store).
//
// The files: engine.go (Config, Build, Run), model.go (loading a model
// and its generation defaults), table.go (--lut: reading, checking and
// the served method's default), store.go (the prefix store), guide.go
// (the guided decoder's guide).
package engine
