// Package regime holds the generation regime: the gen length, the
// denoising steps and the block length a diffusion LM generates in.
//
// One type, Regime, carries the triple wherever it travels: the sampler's
// options (sample.GenOptions), the model card's defaults (load.Card), a
// table's and a profiling or calibration run's record (lut.Table,
// profile.RunInfo, ...), the regime flags of the commands and the API's
// response. The structs embed it, so that x.GenLength reads as before and
// their JSON stays flat: gen_length, steps, block_length.
//
// The package imports nothing of the module's and is imported from every
// layer.
package regime
