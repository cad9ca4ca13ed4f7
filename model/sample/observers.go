package sample

// CandidateObserver is a Planner that wants each step's proposals (the
// confidence of every masked slot the step scored), as d2Cache's certainty
// prior does. Generate calls Candidates after proposing and before the
// decoder commits.
type CandidateObserver interface {
	Candidates(s *Step, c *Candidates)
}

// CandidateNarrower is a Planner whose step's plan computes only some of
// the current block's masked slots (d2Cache: the k of highest certainty
// prior): CandidateRows returns, after Plan, the masked slots the step
// scores, a non-empty sorted subset of masked that the plan computes at
// every layer; nil scores them all. The decoder then chooses among those.
type CandidateNarrower interface {
	CandidateRows(s *Step, masked []int32) []int32
}
