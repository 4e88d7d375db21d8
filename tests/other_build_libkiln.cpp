// A stand-in for another build's libkiln.so.1, so that a plugin of another
// build can be made here (tests/fake_dist_plugin.cpp). It exports one kiln
// symbol under that build's private version node, KILN_PRIVATE_<its ID>
// (tests/CMakeLists.txt writes the version script), as every libkiln exports
// its internals (src/api/kiln.map.in). A plugin linked against it needs that
// node, which this build's libkiln.so.1 does not define: the dynamic loader
// refuses it before any of its code runs. Never loaded itself: by the time
// the plugin is, this build's libkiln.so.1 holds the name.
namespace kiln {

void other_build_internal() {}

}  // namespace kiln
