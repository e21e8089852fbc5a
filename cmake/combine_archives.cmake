# cmake -DAR=ar -DOUT=libx.a -DARCHIVES="a.a;b.a" -P combine_archives.cmake
#
# Writes OUT, one static archive holding every member of ARCHIVES (GNU ar's
# MRI script: addlib), so a user links libqpack.a alone.
set(script "create ${OUT}.tmp\n")
foreach(a ${ARCHIVES})
  string(APPEND script "addlib ${a}\n")
endforeach()
string(APPEND script "save\nend\n")
file(WRITE ${OUT}.mri "${script}")
file(REMOVE ${OUT}.tmp)
execute_process(COMMAND ${AR} -M INPUT_FILE ${OUT}.mri RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ar -M failed for ${OUT}")
endif()
file(RENAME ${OUT}.tmp ${OUT})
