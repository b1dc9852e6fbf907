# Fails when a source file includes a header of a layer above its own (run by every build: the
# check_layers target). Usage: cmake -DSRC=<src directory> -P check_layers.cmake
# Layers, lowest first, each a comma-separated list of path prefixes (relative to src); a
# file's layer is the first whose prefix its path starts with. Files may include their own
# layer and those below.
set(LAYER_GROUPS
  "core/"
  "format/"
  "tokenizer/,template/"
  "backend/ref/,backend/backend,backend/act,backend/blocks,backend/state,backend/expert_source,backend/expert_slot_map,backend/miss_split,backend/arm_choice"
  "backend/cpu/,backend/cuda/"
  "backend/registry"
  "model/"
  "stream/"
  "engine/"
  "convert/"
  "text/"
  "server/"
  "cli/")

function(layer_of path out)
  set(i 0)
  foreach(group IN LISTS LAYER_GROUPS)
    string(REPLACE "," ";" prefixes "${group}")
    foreach(p IN LISTS prefixes)
      string(FIND "${path}" "${p}" at)
      if(at EQUAL 0)
        set(${out} ${i} PARENT_SCOPE)
        return()
      endif()
    endforeach()
    math(EXPR i "${i} + 1")
  endforeach()
  set(${out} -1 PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE files RELATIVE "${SRC}" "${SRC}/*.h" "${SRC}/*.cpp" "${SRC}/*.cu" "${SRC}/*.cuh")
set(bad "")
foreach(f IN LISTS files)
  layer_of("${f}" own)
  if(own LESS 0)
    string(APPEND bad "\n  ${f}: in no layer (add its folder to cmake/check_layers.cmake)")
    continue()
  endif()
  file(STRINGS "${SRC}/${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
    if(NOT EXISTS "${SRC}/${inc}")
      continue()  # a header beside the file or outside src
    endif()
    layer_of("${inc}" theirs)
    if(theirs GREATER own)
      string(APPEND bad "\n  ${f} includes ${inc}, a layer above its own")
    endif()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "layering violations (cmake/check_layers.cmake):${bad}")
endif()
