//! Troupe's actor tree on `ractor`: the runtime actor, one agent actor per agent,
//! a tool executor per call, an event log per run. Actors only sequence the
//! decisions that `troupe-runtime` makes.
