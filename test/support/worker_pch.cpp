// The translation unit that builds the workers' precompiled header (test/CMakeLists.txt,
// accel_add_worker); it holds nothing of its own.
