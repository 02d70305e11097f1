//! Workloads of the seed's experiments (BIPS3D, STEM-II, IOR): each rank's view of one
//! shared file, for tests and `vargr bench io`.
